"""The model, optimisation, schedule and run options (options.py builds the parser): each declared once, with
its default, its help and whether a resume must keep it."""

import argparse

from utils.training.batch_size import DEFAULT_ACCUMULATION
from utils.training.objective import DISTILL_DEFAULTS
from utils.training.probes import LRS, WEIGHT_DECAYS


def micro_batch(value):
    """--batch_size: a count, or "auto" (found by utils/training/batch_size.py)."""
    try:
        return value if value == "auto" else int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is neither an integer nor auto") from None


def learning_rate(value):
    """--lr: a number, or "auto" (the LR range test's suggestion, utils/training/lr_range.py)."""
    try:
        return value if value == "auto" else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is neither a number nor auto") from None


def add_model_options(p):
    """The network, what is done to it, and how it is optimised."""
    g = p.add_argument_group("model and optimisation")
    g.add_argument("--model", resume_key=True, type=str, default=None,
                   help="a torchvision classification or video model name (default: resnet18 for images, "
                        "r2plus1d_18 for video), timm/<name>[.<tag>] (timm.create_model), or hf/<Hub repo or local "
                        "folder> (transformers' AutoModelForImageClassification); an image model on video scores "
                        "each frame and averages (TSN)")
    g.add_argument("--pretrained", resume_key=False,
                   action="store_true", help="start from pretrained weights: torchvision's DEFAULT, "
                   "timm's (the name's tag, else its default), a transformers checkpoint's; the classifier is new")
    g.add_argument("--weights", resume_key=False,
                   type=str, default=None, help="start from these torchvision weights (e.g. "
                   "ResNet50_Weights.IMAGENET1K_V2); read from the torch hub cache offline")
    g.add_argument("--init_from", resume_key=False, type=str, default=None,
                   help="start from a .safetensors/.pth state dict or a run/checkpoint folder (weights only); "
                        "a classifier for another class count is re-initialised")
    g.add_argument("--freeze_backbone", resume_key=True,
                   action="store_true", help="train the classifier only (torchvision: the last "
                   "Linear; timm: get_classifier(); transformers: what is outside the base model)")
    g.add_argument("--lora", resume_key=True, type=int, default=0, metavar="RANK",
                   help="LoRA adapters of this rank (peft) on the model's attention (--lora_targets); only they "
                        "and the classifier train; the saved weights have them merged (an ordinary model)")
    g.add_argument("--lora_alpha", resume_key=True, type=float, default=None,
                   help="--lora's scale numerator: the adapters' update is scaled by alpha / rank (default: the rank)")
    g.add_argument("--lora_dropout", resume_key=True, type=float, default=0.0, help="dropout on the adapters' input")
    g.add_argument("--lora_targets", resume_key=True, nargs="+", default=None, metavar="NAME",
                   help="the layers --lora adapts: each a name or the end of one after a dot (qkv, "
                        "layer4.0.conv1); default: timm ViTs' attn.qkv and attn.proj, transformers' query and value, "
                        "torchvision ViTs' MLP (mlp.0, mlp.3)")
    g.add_argument("--model_ema", resume_key=True, action="store_true",
                   help="keep an exponential moving average of the weights; validation scores it too (val_ema_*)")
    g.add_argument("--model_ema_decay", resume_key=True, type=float, default=0.9998, help="EMA decay per update")
    g.add_argument("--model_ema_steps", resume_key=True,
                   type=int, default=1, help="update the EMA every N optimizer steps")
    g.add_argument("--model_ema_warmup", resume_key=True, action=argparse.BooleanOptionalAction, default=True,
                   help="EMA decay min(decay, (1 + n) / (10 + n)) after n updates (timm's warmup)")
    g.add_argument("--drop_path", resume_key=False, type=float, default=None,
                   help="stochastic depth probability (stochastic_depth_prob of efficientnet, convnext, swin, ...)")
    g.add_argument("--dropout", resume_key=False,
                   type=float, default=None, help="the classifier's dropout (models whose builder takes it)")
    g.add_argument("--zero_init_residual", resume_key=False, action=argparse.BooleanOptionalAction, default=True,
                   help="image ResNets from scratch: each residual block's last BatchNorm starts at zero")
    g.add_argument("--temporal_shift", resume_key=True, action="store_true", help="TSM: a 2D ResNet on video shifts "
                   "1/8 of its channels a frame forward and 1/8 back in each residual block (else TSN)")
    g.add_argument("--sync_bn", resume_key=True, action="store_true",
                   help="BatchNorm statistics over the global batch (SyncBatchNorm), for small per-device batches")
    g.add_argument("--channels_last", resume_key=False,
                   action="store_true", help="model and input in channels-last memory format")
    g.add_argument("--compile", resume_key=False, action="store_true", help="torch.compile the model")
    g.add_argument("--compile_mode", resume_key=False, type=str, default="default",
                   choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
                   help="torch.compile mode")
    g.add_argument("--eval_only", resume_key=False, action="store_true",
                   help="validate the weights of --resume / --init_from / --pretrained and write results.json")
    g.add_argument("--epochs", resume_key=True, type=int, default=18, help="training epochs")
    g.add_argument("--batch_size", resume_key=True, type=micro_batch, default=64,
                   help="batch size per process, a micro-batch (global = this x processes x --grad_accum_steps); "
                        "auto (with --global_batch_size): the largest that fits the device, found before training "
                        "and agreed by every process (docs/batch_and_lr.md)")
    g.add_argument("--global_batch_size", resume_key=True, type=int, default=None, metavar="N",
                   help="the global batch the recipe was tuned for, whatever the hardware: each process takes N / "
                        "processes a step, in micro-batches of --batch_size (--grad_accum_steps follows)")
    g.add_argument("--grad_accum_steps", resume_key=True, type=int, default=DEFAULT_ACCUMULATION,
                   help="micro-batches per optimizer step")
    g.add_argument("--optimizer", resume_key=True, type=str, default="sgd",
                   help="sgd or adamw (torch's), or any optimizer of timm.optim by name: lamb, lars, lion, adan, "
                        "adopt, nadamw, rmsproptf, muon, ... (timm.optim.list_optimizers())")
    g.add_argument("--opt_eps", resume_key=True, type=float, default=None,
                   help="the optimizer's eps (default: its own)")
    g.add_argument("--opt_betas", resume_key=True, type=float, nargs="+", default=None,
                   help="the optimizer's betas (default: its own)")
    g.add_argument("--opt_kwargs", resume_key=True, type=str, nargs="+", default=None, metavar="KEY=VALUE",
                   help="more keyword arguments of the optimizer, each a Python literal (e.g. trust_clip=True)")
    g.add_argument("--lr", resume_key=True, type=learning_rate, default=0.1,
                   help="peak learning rate; auto: the LR range test's suggestion (--lr_find), then training with it "
                        "(docs/batch_and_lr.md)")
    g.add_argument("--lr_find", resume_key=False, action="store_true",
                   help="run the LR range test (an exponential sweep of --lr_find_steps steps of this run's training "
                        "from --lr_find_min to --lr_find_max), write lr_find.png and lr_find.csv, print the "
                        "suggested peak LR, and exit")
    g.add_argument("--lr_find_min", resume_key=False, type=float, default=1e-7, help="the LR range test's first LR")
    g.add_argument("--lr_find_max", resume_key=False, type=float, default=10.0, help="the LR range test's last LR")
    g.add_argument("--lr_find_steps", resume_key=False, type=int, default=100,
                   help="the LR range test's optimizer steps (it stops earlier where the loss diverges)")
    g.add_argument("--momentum", resume_key=True, type=float, default=0.9, help="SGD momentum")
    g.add_argument("--nesterov", resume_key=True,
                   action=argparse.BooleanOptionalAction, default=True, help="SGD Nesterov momentum")
    g.add_argument("--weight_decay", resume_key=True,
                   type=float, default=5e-4, help="weight decay (of weights: see the next two)")
    g.add_argument("--norm_weight_decay", resume_key=True,
                   type=float, default=0.0, help="weight decay of normalisation layers")
    g.add_argument("--bias_weight_decay", resume_key=True,
                   type=float, default=0.0, help="weight decay of the other biases")
    g.add_argument("--lr_scale_batch", resume_key=True, type=int, default=None,
                   help="--lr is for a global batch of N: scale it linearly with the real global batch "
                        "(batch_size x processes x grad_accum_steps)")
    g.add_argument("--label_smoothing", resume_key=False, type=float, default=0.1,
                   help="label smoothing of the training loss (cross-entropy, or BCE's targets)")
    g.add_argument("--bce_loss", resume_key=True, action="store_true",
                   help="train with timm's binary cross-entropy (one-vs-all, as ResNet strikes back's A1-A3) instead "
                        "of cross-entropy; validation still reports cross-entropy")
    g.add_argument("--bce_target_thresh", resume_key=True, type=float, default=None,
                   help="--bce_loss: targets above this become 1, the others 0 (timm's; A1-A3: 0.2)")
    g.add_argument("--pos_weight", resume_key=True, type=str, default=None, choices=("auto",),
                   help="multi-label data: weigh each class's positives in the BCE by its negatives over positives, "
                        "counted over the whole training split (the same on every rank, recorded in results.json)")
    g.add_argument("--multi_label_loss", resume_key=True, type=str, default="bce", choices=("bce", "asl"),
                   help="multi-label data: binary cross-entropy per class, or timm's asymmetric loss "
                        "(AsymmetricLossMultiLabel: gamma_neg 4, gamma_pos 1, clip 0.05)")
    g.add_argument("--layer_decay", resume_key=True, type=float, default=None, metavar="RATE",
                   help="layer-wise LR decay (BEiT/MAE fine-tuning): the LR of layer i of L (0 the stem) is scaled "
                        "by RATE^(L - 1 - i), the head's by 1; ViT, DeiT, Swin, ConvNeXt... of timm, torchvision and "
                        "transformers")
    g.add_argument("--grad_checkpointing", resume_key=False, action="store_true",
                   help="recompute each block's activations in the backward pass instead of keeping them: less "
                        "memory, ~30 %% more compute (timm's and transformers' own switches; torchvision's blocks "
                        "through torch.utils.checkpoint)")
    g.add_argument("--clip_grad_norm", resume_key=False,
                   type=float, default=None, help="clip the global gradient norm to this value")
    g.add_argument("--mixed_precision", resume_key=False, type=str, default=None, choices=("no", "fp16", "bf16"),
                   help="override the accelerate config's mixed precision")


def add_distillation_options(p):
    """Knowledge distillation from a teacher (DeiT's soft and hard kinds)."""
    g = p.add_argument_group("knowledge distillation")
    # The teacher is recorded in checkpoints by the digest of its weights (run_folder.check_teacher), wherever they lie.
    g.add_argument("--teacher", resume_key=False, type=str, default=None,
                   help="distil from this model: a run folder or checkpoint of this script, or a model name "
                        "(torchvision, timm/, hf/, pv/; with --teacher_pretrained its library's weights); it sees "
                        "the student's input, in eval mode, without gradients, and is not saved")
    g.add_argument("--teacher_pretrained", resume_key=False, action="store_true",
                   help="--teacher NAME: with its library's pretrained weights (its classifier must already predict "
                        "this data's classes, in their order: only the count is checked)")
    g.add_argument("--distill", resume_key=True, type=str, default=DISTILL_DEFAULTS["distill"],
                   choices=("soft", "hard"),
                   help="soft: KL divergence from the teacher's softened distribution (x T^2); hard: cross-entropy "
                        "against the teacher's top class (DeiT's two kinds)")
    g.add_argument("--distill_alpha", resume_key=True, type=float, default=DISTILL_DEFAULTS["distill_alpha"],
                   help="the loss is (1 - alpha) x the task loss + alpha x the distillation loss")
    g.add_argument("--distill_temperature", resume_key=True, type=float,
                   default=DISTILL_DEFAULTS["distill_temperature"],
                   help="soft distillation's temperature T")


def add_probe_options(p):
    """A frozen backbone's features classified: a linear head or a kNN vote (utils/run/probe.py)."""
    g = p.add_argument_group("probes on frozen features")
    g.add_argument("--probe", resume_key=False, type=str, default=None, choices=("linear", "knn"),
                   help="train nothing of the model: cache its features (its classifier's input) of both splits with "
                        "the eval transform, then a sweep of linear heads (the best on val kept) or a kNN vote")
    g.add_argument("--knn_k", resume_key=False, type=int, default=20, help="--probe knn: the neighbours that vote")
    g.add_argument("--knn_temperature", resume_key=False, type=float, default=0.07,
                   help="--probe knn: a neighbour's vote is exp(cosine similarity / T) (DINO's)")
    g.add_argument("--probe_lrs", resume_key=False, type=float, nargs="+", default=list(LRS), metavar="LR",
                   help="--probe linear: the learning rates of the sweep (SGD, momentum 0.9, cosine)")
    g.add_argument("--probe_weight_decays", resume_key=False, type=float, nargs="+", default=list(WEIGHT_DECAYS),
                   metavar="WD", help="--probe linear: the weight decays of the sweep, a head each (LR, WD)")


def add_balance_options(p):
    """Long-tailed data: sampling, loss and benchmark options (docs/imbalanced.md)."""
    g = p.add_argument_group("long-tailed data (class counts from the whole training split, the same on every rank)")
    g.add_argument("--sampler", resume_key=True, type=str, default="shuffle", choices=("shuffle", "balanced"),
                   help="shuffle: each epoch a permutation of the training split; balanced: each epoch's samples "
                        "drawn with replacement, a sample's probability proportional to its class's count to the "
                        "power -sampler_power (multi-label: its rarest label's), one draw for every process from "
                        "(seed, epoch); the epoch keeps the split's size unless --steps_per_epoch sets it")
    g.add_argument("--sampler_power", resume_key=True, type=float, default=1.0,
                   help="--sampler balanced: 1 draws every class equally often, 0.5 square-root balancing")
    g.add_argument("--class_weights", resume_key=True, type=str, default=None, metavar="balanced|effective:BETA",
                   help="weigh each sample's training loss by its class: balanced, inverse frequency (scikit-learn's "
                        "n_samples / (n_classes x count)); effective:BETA, (1 - BETA) / (1 - BETA^count) (Cui et al. "
                        "2019, e.g. 0.999); normalised so that the mean weight over the training samples is 1")
    g.add_argument("--logit_adjust", resume_key=True, type=float, default=None, metavar="TAU",
                   help="the logit-adjusted loss (Menon et al. 2021): TAU x log(class prior) added to the logits in "
                        "training only; validation and predict.py see the plain logits (1 is the paper's)")
    g.add_argument("--focal_gamma", resume_key=True, type=float, default=None, metavar="G",
                   help="focal loss: each class's term scaled by (1 - p)^G (softmax cross-entropy, or multi-label "
                        "data's per-class BCE as torchvision's sigmoid_focal_loss; 2 is the paper's)")
    g.add_argument("--imbalance", resume_key=False, type=float, default=None, metavar="RATIO",
                   help="digits and image folders: keep class k's training images in proportion RATIO^(-k/(C-1)) "
                        "(class 0 whole, the last 1/RATIO of it, at least one), a seeded subset; validation whole: "
                        "a long-tailed benchmark")


def add_schedule_options(p):
    """The learning-rate schedule, in epochs."""
    g = p.add_argument_group("learning-rate schedule (in epochs, so it is the same for any world size)")
    g.add_argument("--lr_schedule", resume_key=True,
                   type=str, default="cosine", choices=("cosine", "step"), help="decay after warmup")
    g.add_argument("--warmup_epochs", resume_key=True, type=float, default=None,
                   help="linear warmup length in epochs, fractional ok (default: 1, or a fifth of --epochs if shorter)")
    g.add_argument("--warmup_start_factor", resume_key=True,
                   type=float, default=0.1, help="warmup starts at this x lr (never 0)")
    g.add_argument("--min_lr", resume_key=True, type=float, default=0.0, help="cosine: final learning rate")
    g.add_argument("--lr_milestones", resume_key=True,
                   type=float, nargs="+", default=None, help="step: epochs at which lr *= lr_gamma")
    g.add_argument("--lr_gamma", resume_key=True, type=float, default=0.1, help="step: decay factor")


def add_run_options(p):
    """Seeds, output, checkpoints, validation cadence, dashboards."""
    g = p.add_argument_group("run")
    g.add_argument("--seed", resume_key=True, type=int, default=0,
                   help="seed of weights, shuffling and augmentation (0 .. 2**32 - 1)")
    g.add_argument("--output_dir", resume_key=False, type=str, default=None,
                   help="where results go (default: runs/<time>-<dataset>-<model>); must not hold another run")
    g.add_argument("--resume", resume_key=False, type=str, default=None,
                   help="a checkpoint folder (.../checkpoints/step_N or epoch_E) to continue from exactly, or "
                        "'latest': the newest complete one under --output_dir (a fresh start if there is none)")
    g.add_argument("--checkpoint_every_steps", resume_key=False, type=int, default=None,
                   help="also checkpoint every N optimizer steps, mid-epoch included")
    g.add_argument("--keep_last", resume_key=False,
                   type=int, default=0, help="keep only the newest N checkpoints (0: all)")
    g.add_argument("--keep_best", resume_key=False, type=int, default=0,
                   help="also keep the K checkpoints with the best --track_metric (val top-1; multi-label: mAP; a "
                        "checkpoint follows each validation); the best weights go to "
                        "<output_dir>/best/model.safetensors")
    g.add_argument("--skip_nonfinite_steps", resume_key=False, type=int, default=0,
                   help="skip the update of up to N optimizer steps with a NaN/inf loss (0: stop at the first)")
    g.add_argument("--dist_timeout_s", resume_key=False, type=int, default=600,
                   help="seconds a rank waits in a collective for the others before giving up")
    g.add_argument("--max_train_steps", resume_key=False, type=int, default=None,
                   help="stop after this many optimizer steps (the schedule stays laid out over --epochs)")
    g.add_argument("--threshold", resume_key=False, type=float, default=0.5,
                   help="multi-label data: a class is predicted when its sigmoid probability is at least this "
                        "(precision, recall, F1, exact match)")
    g.add_argument("--tta", resume_key=False, type=str, default=None, choices=("flip",),
                   help="validation: average each view's softmax (multi-label: sigmoid) with its horizontal flip's")
    g.add_argument("--track_metric", resume_key=True, type=str, default=None,
                   choices=("top1", "balanced_accuracy", "macro_f1", "map"),
                   help="the validation figure best/, --keep_best and --early_stop follow (default: top1; multi-label "
                        "data: map, or macro_f1 at --threshold)")
    g.add_argument("--early_stop", resume_key=False, type=int, default=None, metavar="PATIENCE",
                   help="end training after PATIENCE validations in a row without a better --track_metric (val "
                        "top-1; multi-label data: mAP; the EMA's with --model_ema): a finished run, results.json says "
                        "stopped_early")
    g.add_argument("--early_stop_min_delta", resume_key=False, type=float, default=0.0,
                   help="--early_stop: a gain must exceed this to count")
    g.add_argument("--val_every", resume_key=False,
                   type=int, default=1, help="validate every N epochs (and after the last)")
    g.add_argument("--save_every", resume_key=False,
                   type=int, default=0, help="checkpoint every N epochs (0: only at the end)")
    g.add_argument("--log_every", resume_key=False,
                   type=int, default=10, help="log a training line every N optimizer steps")
    g.add_argument("--report_to", resume_key=False,
                   type=str, default="none", choices=("none", "wandb", "tensorboard", "all"),
                   help="dashboards fed the metrics.jsonl rows (wandb offline: WANDB_MODE=offline)")
    g.add_argument("--project_name", resume_key=False,
                   type=str, default="train-classification", help="wandb / TensorBoard project")
    g.add_argument("--push_to_hub", resume_key=False, type=str, default=None, metavar="REPO",
                   help="at the end, upload <output_dir>/model/ with a model card (results, command line) to this "
                        "Hub model repository; tried only when given; a failure is one line, local files kept")
    g.add_argument("--run_name", resume_key=False,
                   type=str, default=None, help="wandb run name (default: the output folder's name)")
    g.add_argument("--wandb_entity", resume_key=False, type=str, default=None, help="wandb team or user")
    g.add_argument("--wandb_tags", resume_key=False, type=str, nargs="+", default=None, help="wandb run tags")
    g.add_argument("--wandb_run_id", resume_key=False, type=str, default=None,
                   help="continue this wandb run (a resumed run continues its checkpoint's run by itself)")
    g.add_argument("--metrics", resume_key=False, type=str, nargs="+", default=None,
                   help="extra evaluate metrics by Hub name (cached when offline) or local module folder, "
                        "options as NAME:KEY=VALUE,... (e.g. f1:average=weighted); scored on top-1 predictions")
    g.add_argument("--dump_rank_metrics", resume_key=False, action="store_true",
                   help="write each rank's validation sums to <output_dir>/eval/epoch_<E>/rank_<R>.json")
    g.add_argument("--calibrate", resume_key=False, action="store_true",
                   help="after training, fit a temperature to the validation split's logits (temperature scaling: the "
                        "NLL's minimum); model/, run.json, predict.py and the ONNX graph divide the logits by it; the "
                        "NLL and ECE before and after in results.json")
    g.add_argument("--top_losses", resume_key=False, type=int, default=24,
                   help="the run's N validation samples of highest loss, in top_losses.csv and top_losses.png at "
                        "its end (0: none)")
    g.add_argument("--no_plots", resume_key=False, action="store_true",
                   help="draw no pictures (curves, confusion matrix or per-class AP, calibration, top losses, "
                        "lr_find.png): their figures are still written as CSV and JSON, report.html without images; "
                        "for the many runs of a search or a cross-validation")
