"""What a run shows and leaves: progress lines and metrics.jsonl, results.json and plots, where the model fails
(top losses), report.html, wandb / TensorBoard trackers, and the model folder its own library loads.

May import: utils.core, utils.models, utils.data, utils.evaluation, utils.training.
"""
