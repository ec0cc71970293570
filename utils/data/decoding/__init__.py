"""Decoders, the bottom of utils/data/: an image file's or a video's bytes to uint8 pixels, in a worker
(images.py, video.py) or on the device (on_device.py). They know nothing of datasets, transforms or sources."""
