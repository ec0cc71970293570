"""DataError, the one error of utils/data/: data that cannot be trained on as asked, told in one line (exit 2)."""

from utils.core.errors import UserError


class DataError(UserError, ValueError):
    """Data that cannot be trained on as asked; the message is one line saying what to do."""
