"""Datasets over decoded samples: image rows, video clips, synthetic images. Each item is
{"pixel_values" (uint8), "labels", "valid", "source", "error"}; a sample's random draws come from (seed, epoch,
sample) alone. They take their transforms as arguments (utils/data/transforms/) and their rows or frames from
the sources (utils/data/sources/)."""
