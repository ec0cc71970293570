"""What a run is made of (Job), and how it is built from the options: the data and its loaders, the model, optimizer
and schedule, prepared by Accelerate (the Accelerator itself: accelerator.py), and the run's records."""

import copy
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed

from utils.core.preemption import StopRequest
from utils.core.seeding import spread
from utils.core.threads import cores_per_process
from utils.data.decoding.on_device import DeviceDecoder
from utils.data.loading.bad_files import BadImages
from utils.data.loading.loaders import build_test_loader, stop_workers
from utils.data.loading.sampling import epoch_draws
from utils.data.loading.statistics import with_statistics
from utils.data.sources.folds import leaked_positions
from utils.data.transforms.batch import BatchInput
from utils.data.transforms.crops import crop_note
from utils.data.sources.video_files import test_views
from utils.config.labels import label_kind
from utils.evaluation.metrics import load_metrics
from utils.evaluation.tasks import task_for
from utils.models.ema import build_ema
from utils.models.libraries import build_model, distillation_head, enable_grad_checkpointing, initialise, layer_ids
from utils.models.protocol import ImageSize
from utils.models.device import for_device
from utils.models.lora import leave_frozen_out, merged
from utils.reporting.progress import StepLogger, start_line
from utils.run.batch_size import given_batch, random_state_kept, take_batch, trial_steps
from utils.run.teacher import build_teacher
from utils.training import checkpoints
from utils.training.checkpoints import TrainTime, resume_position
from utils.training.early_stop import Patience
from utils.training.balance import read_balance
from utils.training.batch_size import BatchPlan, find_micro_batch
from utils.training.objective import Objective
from utils.training.run_folder import FolderError, abandon_newer, check_data, check_frozen, check_teacher
from utils.training.schedule import build_lr_scheduler, build_optimizer, layer_decay_note, lr_notes


@dataclass
class Job:
    """What a run is made of, built once in main(); the loop reads it, and appends to its records at the end."""

    accelerator: Accelerator
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    objective: object  # the training loss: the task's, and a teacher's term (utils/training/objective.py)
    train_loader: object
    val_loader: object
    steps_per_epoch: int
    class_names: list
    out: Path
    logger: StepLogger
    bad_images: BadImages
    stop: StopRequest
    nonfinite_steps: list  # optimizer steps skipped for a NaN/inf loss
    best_score: list  # the best tracked figure so far (val top-1, or mAP), last (--keep_best)
    patience: Patience = None  # --early_stop's count (utils/training/early_stop.py)
    data: dict = None  # the training data's signature (utils/data/sources/protocol.py), kept in checkpoints
    tracker_run_id: str = None  # the wandb run, kept in checkpoints so that a resumed run continues it
    test_loader: object = None  # video: the multi-view test (--test_clips, --test_crops)
    ema: object = None  # --model_ema: the averaged copy (utils/models/ema.py)
    # uint8 batch -> model input, erasing and mixing on the device (utils/data/transforms/batch.py)
    inputs: object = None
    settings: object = None  # the run's configuration (utils/config/settings.py), its batch plan and LR in force
    teacher: object = None  # --teacher (utils/run/teacher.py): what it is is kept in checkpoints
    lr_notes: tuple = ()  # where the LR in force came from (--lr_scale_batch), also at the top of config.yaml
    task: object = None  # what validation scores: one label a sample or several (utils/evaluation/tasks.py)
    # the training split's class counts and the weights drawn from them (utils/training/balance.py)
    balance: object = None
    pictures: object = None  # the end-of-run pictures, drawn while the run ends (utils/reporting/drawing.py)
    batch: BatchPlan = None  # how the global batch is taken: micro-batch, accumulation, processes
    lr_found: dict = None  # --lr auto: the range test's suggestions (the run trains at "suggested")
    frozen: str = None  # --lora: the SHA-256 of the frozen weights, which checkpoints leave out (utils/models/lora.py)
    train_time: TrainTime = field(default_factory=TrainTime)  # over every attempt of a resumed run
    leaked: frozenset = None  # --audit: the validation samples (places) its leaked.csv names

    def bare_model(self):
        """The trained module without its DDP and torch.compile wrappers. (unwrap_model's default keeps
        the compiled wrapper by re-pointing it at the bare module: training would go on without DDP.)"""
        return self.accelerator.unwrap_model(self.model, keep_torch_compile=False)

    def saved_model(self, ema=False):
        """What a weights file for users holds: the trained module unwrapped, or the EMA's; --lora's adapters merged."""
        return merged(self.ema.module if ema else self.bare_model())

    def share_buffers(self, only=None):
        """Rank 0's buffers (BatchNorm's running statistics) to every rank, before scoring and saving, so that
        every rank scores what is saved (rank 0's), and a resumed run scores what the uninterrupted one did.

        DDP does this for the trained model at each forward. FSDP shards parameters, not buffers: each rank's
        statistics follow its own batches. The EMA copy is no DDP module: each rank averages its own model's
        statistics into it, while a checkpoint keeps rank 0's. `only`: the one module about to be scored."""
        modules = [self.model] if self.accelerator.distributed_type == DistributedType.FSDP else []
        if self.ema is not None and self.accelerator.num_processes > 1:
            modules.append(self.ema.module)
        for module in modules if only is None else [m for m in modules if m is only]:
            for buffer in module.buffers():
                torch.distributed.broadcast(buffer, src=0)

    def close(self):
        """The loaders' kept workers stopped and joined now (utils/data/loading/loaders.stop_workers)."""
        for loader in (self.train_loader, self.val_loader, self.test_loader):
            if loader is not None:
                stop_workers(loader)

    def plain_copy(self):
        """A CPU copy of the weights validation follows (the EMA's with --model_ema) on the main process,
        None elsewhere. Every rank calls it: under FSDP the full weights are gathered from the shards
        into a fresh, unsharded module (a sharded one cannot be copied)."""
        accelerator = self.accelerator
        if accelerator.distributed_type == DistributedType.FSDP:
            state = accelerator.get_state_dict(self.model)  # collective; the full dict on the main process
            if not accelerator.is_main_process:
                return None
            model = new_model(self.settings.model, self.class_names, False, self.settings.input)
            model.load_state_dict(state)
            return model
        if not accelerator.is_main_process:
            return None
        # The default memory format: --channels_last tensors are not contiguous, and safetensors stores
        # contiguous ones only.
        plain = copy.deepcopy(self.saved_model(ema=self.ema is not None))
        return plain.to("cpu", memory_format=torch.contiguous_format)


def new_model(chosen, class_names, pretrained, inp):
    """ModelOptions `chosen`'s model for our classes and Input `inp` (clips or images, channels), on the CPU."""
    shift = inp.frames if chosen.temporal_shift else None  # TSM over the clip's frames
    return build_model(chosen.name, num_classes=len(class_names), video=inp.video, temporal_shift=shift,
                       zero_init_residual=chosen.zero_init_residual, drop_path=chosen.drop_path,
                       dropout=chosen.dropout, pretrained=pretrained, class_names=class_names, in_chans=inp.channels,
                       image_size=ImageSize.of(inp))


def new_ema(model, chosen, accelerator):
    """--model_ema's averaged copy of `model` as ModelOptions `chosen` ask, registered with Accelerate (save_state and
    load_state keep it); None without it."""
    if not chosen.ema:
        return None
    ema = build_ema(model, accelerator.device, chosen.ema_decay, chosen.ema_warmup, trained_only=bool(chosen.lora))
    accelerator.register_for_checkpointing(ema)
    return ema


def build_job(settings, accelerator, out, lr_found=None):
    """Data, model, optimizer and schedule of the run Settings `settings` (utils/config/settings.py) describe, prepared
    by Accelerate, as a Job; also returns the training sample count (None for a stream of unknown size) and the loader
    workers per process. The batch plan: the Settings' (a range test before it found it), else the options', tried
    here with --batch_size auto; `lr_found`: --lr auto's suggestions, for the records."""
    evaluation, data = settings.evaluation, settings.data
    # Every rank at once, before the data: a bad --metrics name fails alike on all of them (inside
    # main_process_first the main would fail alone, the others at its barrier)
    metrics = load_metrics(evaluation.metrics)
    num_workers = data.num_workers if data.num_workers is not None else min(8, cores_per_process() // 2)
    settings = take_batch(settings, accelerator, settings.plan or given_batch(settings, accelerator.num_processes))
    train_ds, val_ds, class_names, settings, targets = load_datasets(settings, accelerator, out, num_workers)
    inp, source = settings.input, settings.source
    task = task_for(targets.multi_label, len(class_names), metrics, evaluation.threshold, evaluation.tta,
                    evaluation.track_metric)
    balance = read_balance(settings.balance, source, train_ds, class_names, task, accelerator.print)  # class counts
    teacher = build_teacher(settings, class_names, accelerator, task)
    if settings.plan is None:  # --batch_size auto: the largest micro-batch that fits, tried on the model (its classes)
        settings = tried_batch(settings, class_names, accelerator, teacher)
    micro = settings.plan.micro
    decode = DeviceDecoder(inp.interpolation, accelerator.device) if data.decode_on_device else None
    draws = epoch_draws(settings.data, accelerator)  # --sampler balanced's epoch with --steps_per_epoch
    train_loader, val_loader = source.loaders(accelerator, train_ds, val_ds, micro, num_workers,
                                              ra_reps=data.ra_reps, seed=spread(data.seed), decode=decode,
                                              weights=balance.sample_weights, draws=draws)
    model, optimizer = build_model_and_optimizer(settings, class_names, accelerator)
    if teacher is not None and distillation_head(model, inp.video):
        accelerator.print("distillation: the model's distillation token learns from the teacher, its class token "
                          "from the labels (their mean is scored)")
    steps_per_epoch = math.ceil(len(train_loader) / settings.plan.accumulation)
    scheduler = build_lr_scheduler(optimizer, settings.schedule, steps_per_epoch)
    notes = tuple(lr_notes(settings.optimizer, accelerator.num_processes))  # where the LR in force came from
    for note in notes + settings.warmup_notes:
        accelerator.print(note)
    ema = new_ema(model, settings.model, accelerator)  # from the initial weights, on every rank alike
    model, optimizer, scheduler, frozen = prepare(accelerator, model, optimizer, scheduler, settings)
    loop = settings.loop
    total_steps = min(settings.schedule.epochs * steps_per_epoch, loop.max_train_steps or math.inf)
    logger = StepLogger(accelerator, out / "metrics.jsonl", loop.log_every, steps_per_epoch, total_steps,
                        unit="clip" if inp.video else "img")
    inputs = BatchInput.for_training(settings.batch, len(class_names), accelerator.process_index, inp.mean_std,
                                      inp.pixel_max, channels_last=settings.model.channels_last)
    test_loader = (build_test_loader(accelerator, test_views(settings.data, inp, val_ds), micro, num_workers)
                   if data.test_clips or data.test_crops else None)
    stopping = settings.early_stop
    patience = Patience(stopping.early_stop, stopping.early_stop_min_delta,
                        figure=f"val {'EMA ' * (ema is not None)}{task.tracked_name}")
    job = Job(accelerator=accelerator, model=model, optimizer=optimizer, scheduler=scheduler,
              objective=Objective(settings.losses, task, teacher, balance), train_loader=train_loader,
              val_loader=val_loader, task=task, steps_per_epoch=steps_per_epoch, class_names=class_names, out=out,
              logger=logger, bad_images=BadImages(data.skip_bad_images), stop=StopRequest(), nonfinite_steps=[],
              best_score=[], patience=patience, data=source.signature(train_ds, len(class_names)),
              test_loader=test_loader, ema=ema, inputs=inputs, settings=settings, teacher=teacher, lr_notes=notes,
              balance=balance, batch=settings.plan, lr_found=lr_found, frozen=frozen,
              leaked=leaked_positions(data.audit, val_ds) if data.audit else None)
    accelerator.print(start_line(job, source.sample_count(train_ds), len(val_ds), num_workers))
    return job, source.sample_count(train_ds), num_workers


def tried_batch(settings, class_names, accelerator, teacher):
    """--batch_size auto: the Settings with the largest micro-batch of the global batch that a training step of the
    run's model fits on every process (utils/run/batch_size.py) in force (take_batch), the random streams left as
    they were."""
    def build():
        model, optimizer = build_model_and_optimizer(settings, class_names, accelerator, say=lambda *_: None)
        return model.to(accelerator.device), optimizer

    with random_state_kept(accelerator.device):
        attempt, release = trial_steps(build, accelerator, settings.input, settings.schedule.epochs, settings.model,
                                       teacher)
        try:
            plan = find_micro_batch(accelerator, settings.batch_size.global_batch_size, attempt)
        finally:
            release()
    return take_batch(settings, accelerator, plan)


def prepare(accelerator, model, optimizer, scheduler, settings):
    """The model, optimizer and schedule prepared by Accelerate (--eval_only: the model alone, a checkpoint's optimizer
    and schedule then not loaded); the SHA-256 of the frozen weights that the checkpoints of a --lora run (Settings
    `settings`) leave out, else None."""
    frozen = leave_frozen_out(model, accelerator) if settings.model.lora else None
    if settings.folder.eval_only:
        return accelerator.prepare(model), optimizer, scheduler, frozen
    return *accelerator.prepare(model, optimizer, scheduler), frozen


def build_model_and_optimizer(settings, class_names, accelerator, say=None):
    """The model the options name, its weights, its switches (--grad_checkpointing, --sync_bn, --channels_last),
    not yet prepared; and its optimizer over the weight-decay groups (per layer with --layer_decay). `say`: where
    its lines go (default: accelerator.print)."""
    say = say or accelerator.print
    # Same weights on every rank (one seed). An image model on video scores frames and averages (TSN).
    chosen = settings.model
    model = new_model(chosen, class_names, chosen.pretrained, settings.input)
    initialise(model, chosen, say)  # its weights, and --lora's adapters on them
    if chosen.grad_checkpointing:
        say(enable_grad_checkpointing(model, chosen.name))
    model = for_device(model, accelerator, sync_bn=chosen.sync_bn, channels_last=chosen.channels_last)
    # From here on each rank draws its own augmentation (worker seeds, transforms in this process);
    # with one seed for all, every rank would crop and flip alike at the same batch position.
    set_seed(settings.data.seed, device_specific=True)
    layer_decay = settings.optimizer.layer_decay
    layers = layer_ids(model, chosen.name) if layer_decay is not None else None
    optimizer = build_optimizer(model, settings.optimizer, accelerator.num_processes, layers)
    if layers:
        say(layer_decay_note(layers, layer_decay))
    return model, optimizer


def load_datasets(settings, accelerator, out, num_workers):
    """The train and val datasets and the class names, built by the main process first (one rank builds
    caches, the others reuse them), with what the data and input notes say; the Settings, their Input
    complete (--mean auto: its statistics once the training split is read, or as a resumed run recorded them; the
    random train crop of image files as their kind of labels has it); and whether samples carry several labels."""
    inp = settings.input
    with accelerator.main_process_first():
        train_ds, val_ds, class_names, notes = settings.source.datasets(settings.data, inp, accelerator.process_index,
                                                                        accelerator.num_processes)
    for note in [f"data: {note}" for note in notes] + list(inp.notes):
        accelerator.print(note)
    accelerator.print(f"classes: {', '.join(class_names[:20])}{' ...' if len(class_names) > 20 else ''}")
    if inp.stats_pending:
        recorded = out / "run.json" if settings.folder.resume else None  # a resumed run's statistics, as recorded
        inp = with_statistics(accelerator, inp, train_ds, num_workers, recorded, settings.data.skip_bad_images)
    targets = label_kind(settings, train_ds)  # lists of labels: multi-hot, sigmoid
    if "train_crop_scale" not in settings.source.unused:  # image files: the train crop their kind of labels needs
        accelerator.print(crop_note(settings.input_options, inp, targets))
        inp = inp.with_crop_box(targets)
    return train_ds, val_ds, class_names, replace(settings, input=inp), targets


def resume(job, folder):
    """Load checkpoint `folder` into the job, once it is known to fit (its data, a newer history set
    aside); returns the Position it continues from and its state."""
    accelerator, eval_only = job.accelerator, job.settings.folder.eval_only
    state = checkpoints.read_state(folder)
    if not eval_only:
        check_data(accelerator, state, job.data)
        check_teacher(state, job.teacher and job.teacher.identity)
    try:
        check_frozen(job.bare_model(), job.frozen, state, folder)  # --lora: the frozen weights it left out
        accelerator.load_state(str(folder), **({"strict": False} if job.frozen else {}))
    except ValueError as e:  # torch: "loaded state dict contains a parameter group that doesn't match ..."
        raise FolderError(f"resume: {folder}'s optimizer state does not fit this run's parameter groups "
                          f"({str(e).splitlines()[0]}); resume with the options it was made with, or start a new "
                          f"run from its weights with --init_from <checkpoint>") from None
    abandon_newer(accelerator, job.settings.folder, job.out, folder)  # once it is known to fit
    position = resume_position(state)
    job.patience.load(state.get("early_stop"))
    job.train_time, job.lr_found, job.batch = checkpoints.carried(state, job.lr_found, job.batch)
    if position.step_in_epoch and not eval_only:  # mid-epoch: where this rank's stream workers stood
        job.train_loader.load_position(folder, accelerator.process_index)
    accelerator.print(f"resumed from {folder}: epoch {position.epoch}, step {position.global_step}")
    return position, state
