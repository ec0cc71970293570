"""GPU memory per process of a model under DDP and under FSDP (full sharding), computed on the CPU.

    python benchmarks/fsdp_memory.py                                   # vit_l_16, 8 GPUs, batch 64, bf16, SGD
    python benchmarks/fsdp_memory.py --model vit_h_14 --optimizer adamw --batch_size 32 --image_size 224
    python benchmarks/fsdp_memory.py --model resnet50 --gpus 8 --batch_size 128
    python benchmarks/fsdp_memory.py --grad_checkpointing          # also: activations with --grad_checkpointing

What is counted, in bytes per GPU (the model is built on the meta device: nothing is allocated):
- model state: fp32 weights (4 B/param) + fp32 gradients (4) + optimizer state (SGD momentum 4,
  AdamW 8). DDP keeps all of it on every GPU, plus its gradient buckets (4). FSDP keeps 1/N of it,
  plus, while a wrapped unit runs, that unit gathered whole in bf16 and its bf16 gradient before the
  reduce-scatter, for two units at a time (the next one is prefetched). Units follow
  accel_configs/fsdp.yaml: every submodule of 1 M parameters or more that no larger one contains.
- activations: the tensors autograd saves for the backward of one training forward under bf16
  autocast, measured on the CPU at batch 2 and 3 (a saved-tensor hook adds up their storages, each
  once): the difference is one image's share, scaled to --batch_size, the same under DDP and FSDP;
  the rest is autocast's bf16 copy of the weights, which DDP keeps and FSDP does not make.
  With --grad_checkpointing, the same is measured with the script's checkpointing of the model's blocks
  (utils/models/grad_checkpointing.py): what autograd saves outside them, plus each block's input, which
  checkpoint keeps for the recomputation (the tensors saved inside a block are dropped).
Not counted: the CUDA context and kernels' workspaces (about 0.5-1 GiB), the caching allocator's
fragmentation, the input batch. Figures are computed, not measured on a GPU.
"""

import argparse
import sys
from pathlib import Path

import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from utils.models.grad_checkpointing import checkpoint_blocks  # noqa: E402
from utils.models.torchvision_library import BLOCKS  # noqa: E402

GIB = 2**30


def wrapped_units(model, min_params):
    """The parameter counts of FSDP's units under size-based wrapping: the largest submodules of at
    least `min_params` parameters, children before parents; the rest stays in the root unit."""
    units = []

    def visit(module):
        left = sum(p.numel() for p in module.parameters(recurse=False))
        for child in module.children():
            left += visit(child)
        if left >= min_params and module is not model:
            units.append(left)
            return 0
        return left

    units.append(visit(model))  # the root
    return units


def saved_bytes(name, image_size, batch, grad_checkpointing=False):
    """(bytes autograd saves for backward in one bf16-autocast training forward of `batch` images, the most that
    one of the model's blocks saves of them). With `grad_checkpointing`, what is kept instead: what is saved
    outside the checkpointed blocks, and their inputs."""
    model = torchvision.models.get_model(name, num_classes=1000).train()
    # The weights are counted as model state: their storages are known before the forward.
    seen = {(p.untyped_storage().data_ptr(), p.untyped_storage().nbytes()) for p in model.parameters()}
    total, blocks, current = [0], {}, [None]

    def pack(tensor):
        storage = tensor.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if key not in seen:
            seen.add(key)
            total[0] += storage.nbytes()
            if current[0] is not None:
                blocks[current[0]] = blocks.get(current[0], 0) + storage.nbytes()
        return tensor

    def enter(module, inputs):
        if grad_checkpointing:  # checkpoint keeps a block's inputs for the recomputation
            for tensor in inputs:
                if torch.is_tensor(tensor):
                    pack(tensor)
        current[0] = id(module)

    def leave(module, inputs, output):
        current[0] = None

    if grad_checkpointing:
        assert checkpoint_blocks(model, BLOCKS), f"{name}: no block to checkpoint"
    for block in (m for m in model.modules() if isinstance(m, BLOCKS)):
        block.register_forward_pre_hook(enter)
        block.register_forward_hook(leave)
    x = torch.randn(batch, 3, image_size, image_size)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype=torch.bfloat16):
        model(x).float().sum()
    return total[0], max(blocks.values(), default=0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_l_16")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=64, help="per GPU")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    parser.add_argument("--fsdp_min_num_params", type=int, default=1_000_000)
    parser.add_argument("--grad_checkpointing", action="store_true",
                        help="also measure the activations with the script's --grad_checkpointing, and its totals")
    args = parser.parse_args(argv)

    with torch.device("meta"):
        model = torchvision.models.get_model(args.model, num_classes=1000)
    params = sum(p.numel() for p in model.parameters())
    units = wrapped_units(model, args.fsdp_min_num_params)
    state = params * (4 + 4 + (4 if args.optimizer == "sgd" else 8))
    # Batches of 2 and 3 (BatchNorm trains on 2 or more). What does not grow with the batch is autocast's
    # bf16 copy of the weights, kept for the backward (DDP); FSDP gathers its units in bf16 directly.
    (two, block_two), (three, block_three) = (saved_bytes(args.model, args.image_size, b) for b in (2, 3))
    per_image = three - two
    casts = two - 2 * per_image
    activations = per_image * args.batch_size
    ddp = state + 4 * params + casts + activations
    gathered = 2 * max(units) * (2 + 2)  # two units' bf16 weights and gradients at once
    fsdp = state / args.gpus + gathered + activations
    print(f"{args.model}: {params / 1e6:.1f} M parameters, {len(units)} FSDP units (largest {max(units) / 1e6:.1f} M), "
          f"{args.optimizer}, batch {args.batch_size}/GPU at {args.image_size} px, bf16 autocast")
    print(f"  model state (weights, gradients, optimizer): {state / GIB:.2f} GiB in all")
    print(f"  activations: {per_image / 2**20:.1f} MiB per image, {activations / GIB:.2f} GiB per GPU")
    print(f"  DDP  : {ddp / GIB:.2f} GiB per GPU (state {state / GIB:.2f} + buckets {4 * params / GIB:.2f} "
          f"+ bf16 weight copies {casts / GIB:.2f} + activations)")
    print(f"  FSDP : {fsdp / GIB:.2f} GiB per GPU on {args.gpus} GPUs (state {state / args.gpus / GIB:.2f} "
          f"+ gathered units {gathered / GIB:.2f} + activations)")
    if args.grad_checkpointing:
        # Kept through the forward: the blocks' inputs and what is saved outside them; in the backward, one block
        # at a time is recomputed, whose own activations (and bf16 weight copies) exist until its gradients do.
        (kept_two, _), (kept_three, _) = (saved_bytes(args.model, args.image_size, b, True) for b in (2, 3))
        kept, block = kept_three - kept_two, block_three - block_two
        peak = (kept + block) * args.batch_size
        peak_casts = (kept_two - 2 * kept) + (block_two - 2 * block)  # autocast's (DDP): outside blocks, and one's
        print(f"  --grad_checkpointing: activations kept {kept / 2**20:.1f} MiB per image, plus one block's "
              f"{block / 2**20:.1f} MiB per image recomputed at a time: {peak / GIB:.2f} GiB per GPU at the peak "
              f"instead of {activations / GIB:.2f} ({per_image / (kept + block):.1f}x less); DDP "
              f"{(state + 4 * params + peak_casts + peak) / GIB:.2f} GiB, FSDP "
              f"{(state / args.gpus + gathered + peak) / GIB:.2f} GiB per GPU")

if __name__ == "__main__":
    main()
