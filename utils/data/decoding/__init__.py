"""Decoders, the bottom of utils/data/: an image file's or a video's bytes to uint8 pixels, in a worker
(images.py, video.py) or on the device (on_device.py), and files of any band count and bit depth to float32 (bands.py).
They know nothing of datasets, transforms or sources."""
