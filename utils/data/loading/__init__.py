"""The loaders: map-style data sharded by Accelerate (loaders.py) in the order of the repeated augmentation
sampler where asked (sampling.py), and the files that could not be decoded (bad_files.py)."""
