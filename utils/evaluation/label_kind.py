"""LabelKind: what a kind of labels provides, from the data to the report. There are two, one class each:
SingleLabel (one class a sample: softmax, top-1) and MultiLabel (several: sigmoid, mAP), built by
utils/evaluation/tasks.py (task_for; kind_named and recorded_kind by the name run.json records). The rest of the run
asks the kind and never which one it holds; only where the data is read is the kind decided (the label column's
feature, a label CSV: utils/data/datasets/label_kinds.py), and a third-party API that takes a flag of its own
(cleanlab, transformers' problem_type) is given one.

The data side is inherited from utils/data/datasets/label_kinds.py (ClassIndex, MultiHot), which the data layer
builds and reads without importing this layer.
"""

from typing import ClassVar, Protocol


class LabelKind(Protocol):
    """The members of a kind of labels, by concern."""

    # --- identity: how records and lines name it
    name: ClassVar[str]  # run.json's "label_kind": single_label or multi_label
    multi_label: ClassVar[bool]  # the flag task_kind tells the kinds by (the callers that hold a bool)
    labels_text: ClassVar[str]  # what a sample carries, as lines say it ("one label", "several labels")
    counted: ClassVar[str]  # what its class counts count (samples, positives)
    note: ClassVar[str]  # beside the class count in the start-up line

    # --- data: what a sample's target is and how a split of it is made (utils/data/datasets/label_kinds.py)
    empty: object  # the label of a sample that failed to load

    def target(self, label):
        """A sample's target (a class index, or a float32 multi-hot row), as a loader hands it over."""

    def index(self, label):
        """The class index a loader checks against the class count."""

    def crop_scale(self, side):
        """The random train crop's default area share for images of this `side`."""

    def crop_origin(self, side):
        """How the start-up line names where that default comes from."""

    def refuse(self, option):
        """One line (DataError) when data option `option` (--flip_labels, --imbalance) asks what it cannot give."""

    def class_label(self, feature):
        """The ClassLabel of a `datasets` label column of this kind."""

    def normalised(self, ds, label_col, class_names=None):
        """A split with its label column made ClassLabels (or lists of them)."""

    def check_range(self, ds, class_names):
        """One line when a label of `ds` is not one of `class_names`."""

    def carve(self, train, fraction, seed, names):
        """(train, val, how): the validation carved out of a split without one, stratified as it can be."""

    def strata(self, labels, folds, class_names):
        """(what --folds are stratified by, or None; how it is said)."""

    # --- options: what it refuses and tracks (utils/config/labels.py checks them)
    REFUSED: ClassVar[dict]  # {option: why} of the options for the other kind
    TRACKED: ClassVar[dict]  # {--track_metric: (figure, its name)}
    DEFAULT_TRACK: ClassVar[str]  # the tracked figure without --track_metric
    UNTRACKED: ClassVar[str]  # why --track_metric of the other kind is refused

    def of(self, num_classes, metrics=None, threshold=None, tta_kind=None, track=None):
        """The run's kind of `num_classes` classes, scored as the options say (a classmethod: tasks.task_for)."""

    # --- loss and scoring: training's loss, validation's figures (utils/evaluation/scoring.py gathers them)
    def loss(self, options, balance=None):
        """The training loss of these labels that LossOptions `options` ask for."""

    def distillation(self, kind, student, teacher, temperature):
        """DeiT's distillation term, per sample, of a teacher's logits."""

    def class_counts(self, rows, weights=None):
        """Each class's training samples (or positives), of the split's labels `rows`."""

    def sample_counts(self, rows, counts):
        """What --sampler balanced weighs each sample by: its class's count (its rarest label's)."""

    def outputs(self, model, pixels):
        """The model's scores of a batch (with --tta flip averaged over the two views)."""

    def probabilities(self, model, pixels):
        """Its scores as probabilities (softmax, or a sigmoid a class), as predict.py lists them."""

    def activate(self, logits):
        """Logits as probabilities."""

    def fields(self, logits, labels):
        """The per-sample tensors validation gathers."""

    def samples(self, fields, index):
        """Each scored sample's labels, prediction and loss: what top_losses.csv and .png show."""

    def figures(self, fields):
        """The figures of the gathered fields (with "label_kind": its name, what reporting asks by)."""

    def own(self, fields, owners, rank):
        """A rank's own sums (--dump_rank_metrics)."""

    def global_sums(self, figures):
        """What the per-rank sums add up to."""

    def decided(self, logits, labels):
        """(predicted, true) labels of a batch, as label_text takes them."""

    def video_labels(self, videos):
        """The multi-view test's store of each video's label."""

    def clip_hits(self, probs, labels):
        """The multi-view test's clips whose own prediction is right."""

    def averaged_fields(self, probs, labels):
        """The fields of videos scored by their averaged probabilities."""

    def tuned_thresholds(self, figures, threshold, ema):
        """Per-class thresholds model/thresholds.json keeps; None where labels are not decided at a threshold."""

    tracked: str  # the figure --keep_best, --early_stop and best/ follow (tracked_name: as lines say it)
    ema_keys: tuple  # what validation also reports of the averaged weights
    sum_keys: ClassVar[tuple]  # --dump_rank_metrics: what adds up over ranks
    thresholded: ClassVar[bool]  # predict.py decides each class at a threshold (else: the top class)
    exported: ClassVar[str]  # what its exported graph outputs (logits, probabilities)

    def exported_output(self, logits):
        """The exported graph's output of the logits (None: the logits as they are)."""

    # --- reporting: what lines, rows, files and pictures show of it (utils/reporting/ draws what it names)
    clip_figure: ClassVar[str]  # the multi-view test's figure of each clip's own prediction
    folder_fields: ClassVar[dict]  # what a model folder's config says of the kind
    video_keys: ClassVar[tuple]  # the multi-view test's figures
    failure_columns: ClassVar[tuple]  # top_losses.csv's columns beside the labels
    class_table: ClassVar[str]  # the per-class text table (utils/reporting/report.py TABLES)
    class_picture: ClassVar[str]  # the picture of the classes, its file's stem (report.py CLASS_PICTURES)
    class_csv: ClassVar[str]  # the per-class CSV, its file's stem (report.py CLASS_CSVS)
    calibrated: ClassVar[str]  # what calibration.png's confidence is of

    def line(self, figures):
        """Validation's figures in the log line."""

    def ema_line(self, figures):
        """The EMA weights' figures in the log line."""

    def row(self, figures, class_names):
        """Validation's row of metrics.jsonl and the trackers."""

    def results(self, figures, class_names):
        """Its share of results.json."""

    def label_text(self, label, class_names):
        """A label as lines and tables write it."""

    def failure_cells(self, samples, i, class_names):
        """top_losses.csv's failure_columns of sample `i`."""

    def failure_title(self, samples, i, class_names):
        """top_losses.png's title of sample `i`."""

    def shown_probability(self, samples, i):
        """The probability the table of predictions shows of sample `i` (None: none stands for it)."""

    def confusion(self, figures):
        """Its confusion matrix (charted, most_confused.csv), None where classes are not confused one for another."""

    def curves(self, last):
        """[(figure, label)] curves.png draws per epoch, labelled from the last validation row `last`."""

    def card_rows(self, results):
        """[(name, value)] of the model card's table, of results.json's figures."""

    def headline(self, results):
        """The tracked figure as the Hub commit message says it."""
