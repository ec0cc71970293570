"""A run: what it is made of (Job) and how it is built from the options, for train_classification.py,
whose loop reads it.

May import: every package below it (core, models, data, evaluation, training, reporting, config).
"""
