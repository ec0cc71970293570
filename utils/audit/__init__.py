"""The data audit (audit.py): each sample of both splits read once (survey.py: look.py's record of its decoded pixels,
and a trained run's features), near copies found among nearest neighbours and verified on the pixels (copies.py), the
findings ranked (findings.py) and written as a CSV, a summary, the lists --exclude and --audit take and a page
(pages.py).

May import: every package below it (core, models, data, evaluation, training, reporting, config, run, export).
"""
