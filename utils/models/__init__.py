"""Models: a --model name resolved to its library (torchvision, `timm/`, `hf/`, `pv/`: one protocol), built (a stem
for other channel counts, TSN or TSM on clips, gradient checkpointing), its weights read and matched, and the EMA of
its weights. They read no options: what they are asked is handed to them.

May import: utils.core.
"""
