"""The drivers: tools that start train_classification.py as its user does (an `accelerate launch` per run, the options
in argv) and read what its runs write. tune.py's search over the script's options: the space and its checks against the
script's parser (space.py), one trial's run as its own launched process, followed and pruned from outside
(trial_run.py), the Optuna study that proposes, shares and records the trials (study.py), and what the study folder
gets (study_records.py); crossval.py's folds: each fold's run, their figures across folds (cross_validation.py) and
the label issues found in the held-out predictions (label_issues.py). Nothing of it runs inside a training process.

May import: every package below it (core, models, data, evaluation, training, reporting, config, run, export, audit).
"""
