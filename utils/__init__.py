"""The parts of a run, in layers: each package may import only the packages below it (tests/test_layers.py).

    core        errors, files written whole, seeds, threads, signals, restarts   (imports nothing of ours)
    models      model libraries (torchvision, timm/, hf/, pv/), weights, EMA, checkpointed blocks, TSM
    data        decoders, datasets, transforms, streaming, loaders, the data sources (sub-packages)
    evaluation  the one scoring loop, per-sample results gathered into figures, calibration, multi-view test, TTA
    training    optimizer and schedule, the loss, early stopping, checkpoints, the run folder
    reporting   progress lines, results.json and plots, where the model fails, report.html, trackers, model folder
    config      the options, YAML recipes and their checks, the run's configuration (Settings) typed from them once
    run         a run's Job built from its configuration, its records, a teacher, a trained run read back
    drivers     tune.py's search and crossval.py's folds: runs launched as a user launches them, their files read
and above them all, `utils/inference.py`, `train_classification.py` and `predict.py`.
"""
