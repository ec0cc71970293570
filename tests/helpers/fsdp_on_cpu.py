"""Run a script with Accelerate's FSDP on CPU processes (gloo), which Accelerate itself does not allow.

    accelerate launch --config_file accel_configs/fsdp.yaml --num_processes 2 ... \
        tests/helpers/fsdp_on_cpu.py train_classification.py [options...]
    run_ranks(["train_classification.py", *options], target="helpers.fsdp_on_cpu:main",      # tests/ranks.py
              launcher_args=["--config_file", "accel_configs/fsdp.yaml"])

Accelerate (1.15) selects FSDP only for GPU-like devices: on a CPU machine an FSDP config trains as
plain data parallel (the script says so). PyTorch's FSDP2 itself runs on CPU over gloo, so the
tests flip Accelerate's choice back to FSDP here, outside the script, and exercise the script's real
FSDP path: sharded parameters, sharded checkpoints, full-state export.
"""

import runpy
import sys
from pathlib import Path

from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import DistributedType

ROOT = Path(__file__).resolve().parents[2]
_init = AcceleratorState.__init__


def _init_with_fsdp(self, *args, fsdp_plugin=None, **kwargs):
    _init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
    if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        self.distributed_type = DistributedType.FSDP
        self.fsdp_plugin = fsdp_plugin
        # Every later AcceleratorState() copies the process state over its own: change it there too.
        PartialState._shared_state["distributed_type"] = DistributedType.FSDP


def main(argv=None):
    """Run `script argv` (a path under the repository) as __main__, with Accelerate's FSDP on CPU processes."""
    script, *argv = sys.argv[1:] if argv is None else argv
    AcceleratorState.__init__ = _init_with_fsdp
    sys.argv = [script, *argv]
    sys.path.insert(0, str(ROOT))
    runpy.run_path(str(ROOT / script), run_name="__main__")


if __name__ == "__main__":
    main()
