"""Build any torchvision classification model by name, with a helpful error for unknown names."""

import difflib

import torchvision


def classification_models():
    """Names that torchvision.models.get_model accepts for image classification."""
    return torchvision.models.list_models(module=torchvision.models)


def check_model_name(name):
    """Raise ValueError naming close matches when `name` is not a torchvision classification model."""
    names = classification_models()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see torchvision.models.list_models()"
        raise ValueError(f"{name!r} is not a torchvision classification model{hint}")


def build_model(name, num_classes):
    """A randomly initialised model whose classifier has `num_classes` outputs."""
    return torchvision.models.get_model(name, weights=None, num_classes=num_classes)
