"""The loaders: map-style data sharded by Accelerate (loaders.py) in the order of the class-balanced or repeated
augmentation sampler where asked (sampling.py), --mean auto's statistics (statistics.py), and the files that could not
be decoded (bad_files.py)."""
