"""ModelError, the one error of the models: a name, option or weights that cannot be used as asked, told in one line."""

from utils.core.errors import UserError


class ModelError(UserError, ValueError):
    """A model or weights that cannot be used as asked; the message is one line saying what to do."""


def missing_library(prefix, package):
    """The one-line error for a namespace whose library is not installed (requirements-models.txt)."""
    return ModelError(f"{prefix}<name> models need {package}, which is not installed: pip install -r "
                      f"requirements-models.txt (or pip install {package})")
