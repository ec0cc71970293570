"""Exports of a trained run (export.py): its eval graph (graph.py) written in the formats people deploy on, each by
its runtime's own library (formats.py), and the parity check of the file against the PyTorch model over the whole
validation split, with its speed beside eager PyTorch's (parity.py).

May import: every package below it (core, models, data, evaluation, training, reporting, config, run).
"""
