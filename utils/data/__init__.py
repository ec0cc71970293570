"""Data, in sub-packages as it flows, each importing only those above it here (tests/test_layers.py):

    errors.py   DataError: data that cannot be trained on as asked, one line
    decoding    bytes to uint8 pixels: images, video frames, and on the device (--decode_on_device)
    transforms  the run's model Input, the image and video presets, the batch on the device
    datasets    samples of images, clips and synthetic images, each a function of (seed, epoch, sample)
    loading     map-style loaders sharded by Accelerate, repeated augmentation, undecodable files
    streaming   --streaming: a process's share of the shards, read in blocks, its loader and position
    sources     where the data comes from (one protocol, picked once per run by sources/catalog.py)

May import: utils.core, utils.models (a model's own input size and normalisation).
"""
