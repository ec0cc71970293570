"""Configuration: the command-line options, YAML recipes that set their defaults, the checks across
options, and the Settings the rest of the run derives from them once (settings.py).

May import: every package below it (core, models, data, evaluation, training, reporting).
"""
