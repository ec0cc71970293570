"""Configuration: the command-line options, YAML recipes that set their defaults, and the checks
across options, resolved once before anything is built.

May import: every package below it (core, models, data, evaluation, training, reporting).
"""
