"""Transforms: the run's model input resolved once (input.py), the image and video presets that
end in uint8 (images.py, video.py), the random train crop's defaults (crops.py), and what happens to a batch on the
device (batch.py)."""
