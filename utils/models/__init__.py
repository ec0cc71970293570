"""Models: a --model name resolved to its library (torchvision, `timm/`, `hf/`), built, its weights read
and matched, and the EMA of its weights.

May import: utils.core.
"""
