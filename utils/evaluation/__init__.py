"""Evaluation: the one scoring loop, per-sample results gathered from every rank and turned into figures (sums,
never means of means) by the run's task (one label a sample or several), calibration, test-time augmentation and
the multi-view test of videos.

May import: utils.core, utils.models, utils.data.
"""
