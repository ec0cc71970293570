"""--global_batch_size and --batch_size auto: the recipe's global batch kept on any process count, the largest
micro-batch that fits found on every process and agreed by all, a run with it bitwise the run typed by hand.

On these CPUs nothing runs out of memory: tests/helpers/device_memory.py makes each rank's tries of micro-batches past
its own limit raise torch.OutOfMemoryError, as a CUDA device does."""

import random

import numpy as np
import pytest
import torch
from conftest import TINY, assert_same_weights, main_fails, read_json, read_jsonl, resumed_from, run_main
from ranks import run_ranks, ranks_ok

from utils.core.errors import ConfigError
from utils.training.batch_size import divisors, plan_for

BASE = [a for a in TINY if a not in ("--batch_size", "8")] + ["--epochs", "2", "--warmup_epochs", "0.5",
                                                               "--log_every", "1"]


def test_a_global_batch_is_split_exactly_or_refused():
    assert divisors(12) == [12, 6, 4, 3, 2, 1] and divisors(1) == [1]
    plan = plan_for(64, 2, 8)
    assert (plan.micro, plan.accumulation, plan.processes, plan.global_batch) == (8, 4, 2, 64)
    assert plan.micro * plan.accumulation * plan.processes == 64 and not plan.found
    assert plan_for(64, 2, 8, accumulation=4).accumulation == 4  # said beside it, and the same: fine
    for args, message in (((64, 3, 8), "global_batch_size: 64 is not a multiple of the 3 processes"),
                          ((64, 2, 12), "batch_size: 12 does not divide each process's share of the global batch "
                                        "(64 / 2 process(es) = 32); pick one of 32, 16, 8, 4, 2, 1"),
                          ((64, 2, 8, 2), "grad_accum_steps: follows from --global_batch_size (32 a process / "
                                          "micro-batch 8 = 4), not 2")):
        with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
            plan_for(*args)


@pytest.mark.parametrize("extra, message", [
    (["--batch_size", "auto"], "batch_size: auto finds the micro-batch of a global batch: give --global_batch_size"),
    (["--batch_size", "auto", "--global_batch_size", "16", "--eval_only", "--init_from", "x.safetensors"],
     "batch_size: auto tries training steps, and --eval_only trains none"),
    (["--global_batch_size", "0"], "global_batch_size: must be >= 1"),
    (["--global_batch_size", "12", "--batch_size", "5"], "batch_size: 5 does not divide each process's share of the "
                                                          "global batch (12 / 1 process(es) = 12)"),
    (["--global_batch_size", "16", "--batch_size", "4", "--grad_accum_steps", "2"],
     "grad_accum_steps: follows from --global_batch_size (16 a process / micro-batch 4 = 4), not 2"),
])
def test_what_cannot_be_split_is_one_line_and_nothing_is_written(extra, message, tmp_path, capsys):
    code, err = main_fails([*BASE, *extra, "--output_dir", tmp_path / "run"], capsys)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(errors) == 1 and message in errors[0], err
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "results.json").exists()


@pytest.mark.slow
def test_on_a_cpu_the_whole_share_is_taken_and_the_schedule_is_the_global_batchs(tmp_path, capsys):
    """One process: --global_batch_size 16 --batch_size auto tries 16 first, which a CPU fits (nothing raises there);
    --global_batch_size 16 --batch_size 4 takes it in 4 micro-batches: the same optimizer steps and LR at each. The
    try's model is built as the run's (gradient checkpointing too), silently: each start-up line is said once."""
    base = [*BASE, "--epochs", "1", "--grad_checkpointing"]
    found = run_main([*base, "--global_batch_size", "16", "--batch_size", "auto", "--output_dir", tmp_path / "auto"])
    said = capsys.readouterr().out.splitlines()
    assert len([line for line in said if "checkpointing" in line]) == 1, said
    assert found["batch"] == {"global_batch_size": 16, "processes": 1, "batch_size": 16, "grad_accum_steps": 1,
                              "found": True, "tried": [[16, "fits"]]}
    assert read_json(tmp_path / "auto" / "run.json")["batch"] == found["batch"]
    split = run_main([*base, "--global_batch_size", "16", "--batch_size", "4", "--output_dir", tmp_path / "split"])
    assert split["batch"] == {"global_batch_size": 16, "processes": 1, "batch_size": 4, "grad_accum_steps": 4,
                              "found": False, "tried": []}
    lrs = [[(r["step"], r["lr"]) for r in read_jsonl(tmp_path / run / "metrics.jsonl") if "lr" in r]
           for run in ("auto", "split")]
    assert lrs[0] == lrs[1] and len(lrs[0]) == 4  # 64 samples / 16 a step


@pytest.mark.slow
def test_two_processes_agree_on_what_fits_both_and_train_bitwise_as_typed_then_resume_without_trying_again(tmp_path):
    """Rank 0 fits micro-batches of 8, rank 1 of 4: the global batch of 16 on 2 processes (8 each) is taken in 4 x 2
    on both, the run's weights bitwise those of --batch_size 4 --grad_accum_steps 2 typed by hand; SIGKILLed (workers
    on) and resumed with every try forbidden, it ends there too."""
    base = [*BASE, "--num_workers", "1", "--checkpoint_every_steps", "1"]
    typed = tmp_path / "typed"
    ranks_ok([*base, "--batch_size", "4", "--grad_accum_steps", "2", "--output_dir", typed], nproc=2)
    auto = [*base, "--global_batch_size", "16", "--batch_size", "auto", "--output_dir", tmp_path / "auto"]
    killed = run_ranks(["8,4", "step:3", "KILL", "group", "0", *auto], nproc=2, target="helpers.device_memory:main")
    assert killed.returncode != 0 and not killed.timed_out, killed.report()
    line = ("batch_size auto: tried 8 (out of memory on process 1), 4 (fits); micro-batch 4 x 2 accumulation step(s) "
            "x 2 process(es) = global batch 16")
    assert killed.ranks[0].stdout.count(line) == 1, killed.report()
    resumed = ranks_ok(["never,never", *auto, "--resume", "latest"], nproc=2, target="helpers.device_memory:main")
    assert resumed_from(resumed.stdout) == tmp_path / "auto" / "checkpoints" / "step_2"  # killed after step 3
    assert "as the checkpoint was trained (not tried again)" in resumed.stdout
    assert_same_weights(tmp_path / "auto", typed)
    results = read_json(tmp_path / "auto" / "results.json")
    assert (results["batch"]["batch_size"], results["batch"]["grad_accum_steps"]) == (4, 2)
    # the tries of the first start, kept by its checkpoint; its training time too, before the resumed part's
    assert results["batch"]["tried"] == [[8, "out of memory on process 1"], [4, "fits"]] and results["batch"]["found"]
    assert read_json(tmp_path / "auto" / "run.json")["batch"] == results["batch"]
    before = read_json(tmp_path / "auto" / "checkpoints" / "step_2" / "training_state.json")["train_time_s"]
    resumed_epochs = sum(row["epoch_time_s"] for row in read_jsonl(tmp_path / "auto" / "metrics.jsonl")
                         if "epoch_time_s" in row)  # each written by the resumed run (killed in the first epoch)
    assert before > 0 and results["train_time_s"] >= before + resumed_epochs - 0.01
    assert read_json(typed / "results.json")["batch"] == {"global_batch_size": 16, "processes": 2, "batch_size": 4,
                                                         "grad_accum_steps": 2, "found": False, "tried": []}
    assert results["val_top1"] == read_json(typed / "results.json")["val_top1"]


@pytest.mark.slow
def test_a_process_whose_try_breaks_stops_every_process_with_one_line(tmp_path):
    job = run_ranks(["any,raise", *BASE, "--global_batch_size", "16", "--batch_size", "auto", "--output_dir",
                     tmp_path / "run"], nproc=2, target="helpers.device_memory:main", timeout=120)
    assert not job.timed_out and all(rank.returncode == 2 for rank in job.ranks), job.report()
    for rank in job.ranks:
        errors = [line for line in rank.stderr.splitlines() if "error:" in line]
        assert errors == ["train_classification.py: error: batch_size auto: process 1 failed trying a micro-batch "
                          "of 8: ValueError: a kernel that breaks"], job.report()
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_out_of_memory_in_training_is_one_line_saying_what_to_pass(tmp_path, capsys, monkeypatch):
    import train_classification

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    monkeypatch.setattr(train_classification, "training_loss", out_of_memory)
    code, err = main_fails([*BASE, "--batch_size", "8", "--grad_accum_steps", "2", "--output_dir", tmp_path / "run"],
                           capsys)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 1 and len(errors) == 1, err
    assert errors[0] == ("train_classification.py: error: out of memory on cpu with a micro-batch of 8 "
                         "(OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB); pass --global_batch_size "
                         "16 --batch_size auto to train the same global batch in the largest micro-batches that fit")
    assert "Traceback" not in err


def test_the_probe_puts_the_random_streams_back():
    from utils.run.batch_size import random_state_kept

    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    before = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    with random_state_kept(torch.device("cpu")):
        random.random(), np.random.rand(3), torch.rand(5), torch.manual_seed(7)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == before


def test_the_device_says_out_of_memory_in_its_own_words():
    from utils.training.batch_size import is_out_of_memory

    assert is_out_of_memory(torch.OutOfMemoryError("CUDA error"))  # CUDA's own type, whatever its message
    assert is_out_of_memory(RuntimeError("MPS backend out of memory (MPS allocated: 8 GB)"))  # MPS, XPU: words
    assert not is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_out_of_memory(ValueError("out of memory"))  # not the device's


def test_a_try_trains_one_step_at_the_runs_largest_input_on_a_twin_and_frees_it():
    """trial_steps: the input of the largest train size (progressive resizing's last; a clip's frames for video), one
    forward, backward and optimizer step (the optimizer's state is what a step holds), the gradients dropped."""
    import contextlib
    import types

    from utils.config.settings import input_for
    from utils.config.options import parse_args
    from utils.run.batch_size import largest_input, trial_steps

    image = input_for(parse_args(["--image_size", "32", "--progressive_resize", "32", "96", "0", "3", "--epochs", "4"]))
    assert largest_input(image, 4) == (3, 96, 96) and largest_input(image, 1) == (3, 32, 32)  # the last epoch's
    clips = input_for(parse_args(["--dataset", "moving_digits", "--image_size", "16", "--clip_len", "4",
                                  "--num_segments", "2"]))
    assert largest_input(clips, 3) == (3, 8, 16, 16)

    seen = {}

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 5, 3)

        def forward(self, pixels):
            seen["shape"] = tuple(pixels.shape)
            return self.conv(pixels).mean(dim=(2, 3))

    def build():
        model = Model()
        seen["model"], seen["optimizer"] = model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, seen["optimizer"]

    device = types.SimpleNamespace(device=torch.device("cpu"), autocast=contextlib.nullcontext)
    chosen = types.SimpleNamespace(ema=False, channels_last=False)
    attempt, release = trial_steps(build, device, image, 4, chosen)
    before = seen["model"].conv.weight.detach().clone()
    attempt(6)
    assert seen["shape"] == (6, 3, 96, 96)
    assert not torch.equal(seen["model"].conv.weight, before)  # a step was taken, on the twin
    assert all("momentum_buffer" in seen["optimizer"].state[p] for p in seen["model"].parameters())
    assert all(p.grad is None for p in seen["model"].parameters())
    release()


def test_the_plan_is_in_force_wherever_the_batch_is_read():
    """take_batch: the options, the Settings' optimizer (the LR --lr_scale_batch puts in force) and data (a stream's
    epoch), and the Accelerator's accumulation all get the plan's micro-batch and accumulation."""
    import types

    from utils.config.options import parse
    from utils.run.batch_size import take_batch
    from utils.training.schedule import effective_lr

    from utils.config.options import flat_options, resume_values

    settings = parse([*BASE, "--global_batch_size", "16", "--batch_size", "4", "--lr", "0.4", "--lr_scale_batch", "16"])
    accelerator = types.SimpleNamespace(gradient_accumulation_steps=1, print=lambda *_: None)
    plan = plan_for(16, 1, 4)
    settings = take_batch(settings, accelerator, plan)
    assert settings.plan == plan and accelerator.gradient_accumulation_steps == 4
    options = flat_options(settings)  # what config.yaml, the dashboards and the checkpoints record
    assert (options["batch_size"], options["grad_accum_steps"], options["global_batch_size"]) == (4, 4, 16)
    assert (resume_values(settings)["batch_size"], resume_values(settings)["grad_accum_steps"]) == (4, 4)
    assert (settings.optimizer.batch_size, settings.optimizer.grad_accum_steps) == (4, 4)
    assert (settings.data.batch_size, settings.data.grad_accum_steps) == (4, 4)
    assert effective_lr(settings.optimizer, 1) == pytest.approx(0.4)  # 4 x 4 x 1 = the 16 it was tuned for
