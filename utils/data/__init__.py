"""Data: where images and videos come from (embedded digits, folders, the Hub, list files, streamed
shards), their transforms and clips, the sharded loaders, and what happens to a batch on the device.

May import: utils.core, utils.models (a model's own input size and normalisation).
"""
