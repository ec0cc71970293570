"""When the loop validates, checkpoints and ends (utils/training/cadence.py), as pure functions of where training
stands: the edges of each option, where an off-by-one would train, save or validate one step or epoch differently."""

import conftest  # noqa: F401  (puts the repo root on sys.path)

from utils.training.cadence import LoopOptions, checkpoint_due, reached_end, validation_due
from utils.training.checkpoints import CheckpointOptions


def loop(max_train_steps=None, val_every=1):
    return LoopOptions(max_train_steps=max_train_steps, val_every=val_every, log_every=10, clip_grad_norm=None,
                       skip_nonfinite_steps=0)


def test_training_ends_at_its_last_epochs_end_or_exactly_at_max_train_steps():
    assert reached_end(loop(), 3, epoch=2, global_step=30, epoch_end=True)
    assert not reached_end(loop(), 3, epoch=2, global_step=29, epoch_end=False)  # stopped mid-way through the last
    assert not reached_end(loop(), 3, epoch=1, global_step=20, epoch_end=True)
    assert reached_end(loop(max_train_steps=5), 3, epoch=0, global_step=5, epoch_end=False)  # the step it names
    assert not reached_end(loop(max_train_steps=5), 3, epoch=0, global_step=4, epoch_end=False)
    assert reached_end(loop(max_train_steps=0), 3, epoch=0, global_step=0, epoch_end=False)


def test_validation_every_n_epochs_and_at_the_end():
    assert [validation_due(loop(val_every=2), epoch, False) for epoch in range(4)] == [False, True, False, True]
    assert validation_due(loop(val_every=2), 0, finished=True)


def test_checkpoints_every_n_steps_every_n_epochs_after_a_validation_kept_and_never_at_the_end():
    def options(steps=None, every=0, keep_best=0):
        return CheckpointOptions(checkpoint_every_steps=steps, save_every=every, keep_last=0, keep_best=keep_best)

    assert [checkpoint_due(options(steps=3), 0, step, epoch_end=False) for step in (2, 3, 4, 6)] == \
        [False, True, False, True]
    assert [checkpoint_due(options(every=2), epoch, 100, epoch_end=True) for epoch in range(4)] == \
        [False, True, False, True]
    assert not checkpoint_due(options(every=2), 1, 100, epoch_end=True, finished=True)  # the end saves its own
    assert checkpoint_due(options(keep_best=1), 0, 100, epoch_end=True, validated=True)
    assert not checkpoint_due(options(keep_best=1), 0, 100, epoch_end=True, validated=False)
    assert not checkpoint_due(options(), 0, 100, epoch_end=True, validated=True)
