"""Evaluation: per-sample results gathered from every rank turned into figures through the shipped
`evaluate` modules (sums, never means of means), and the multi-view test of videos.

May import: utils.core, utils.models, utils.data.
"""
