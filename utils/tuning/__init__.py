"""tune.py's search over train_classification.py's options: the space and its checks against the script's parser
(space.py), one trial's run as its own launched process, followed and pruned from outside (trial_run.py), the Optuna
study that proposes, shares and records the trials (study.py), and what the study folder gets (study_records.py).
Nothing of it runs inside a training process: a trial's options reach it through argv.

May import: every package below it (core, models, data, evaluation, training, reporting, config, run).
"""
