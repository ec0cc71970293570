"""Small single-purpose helpers for train_classification.py."""
