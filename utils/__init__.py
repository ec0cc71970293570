"""The parts of a run, in layers: each package may import only the packages below it (tests/test_layers.py).

    core        errors, files written whole, seeds, threads, signals, restarts   (imports nothing of ours)
    models      model libraries (torchvision, timm/, hf/), weights, EMA
    data        sources, transforms, clips, streams, loaders, the batch on the device
    evaluation  per-sample results gathered into figures, multi-view video test
    training    optimizer and schedule, checkpoints, the run folder
    reporting   progress lines, results.json and plots, trackers, the model folder
    config      the options, YAML recipes and their checks
and above them all, `utils/inference.py`, `train_classification.py` and `predict.py`.
"""
