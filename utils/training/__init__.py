"""Training: the optimizer and its schedule, the loss and the class balance it weighs with, early stopping,
checkpoints that are whole or absent, and the run folder (one live run per folder, which checkpoint a run continues
from, what must not change on resume).

May import: utils.core, utils.models, utils.data, utils.evaluation.
"""
