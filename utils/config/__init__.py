"""Configuration: the command-line options, YAML recipes that set their defaults, the checks across options (and,
once the data is loaded, against its kind of labels: labels.py), and the Settings the rest of the run derives from
them once, each subsystem's options typed among them (settings.py).

May import: every package below it (core, models, data, evaluation, training, reporting).
"""
