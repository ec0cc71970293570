"""Hub datasets, read from the local cache when offline: their declared features, and the dataset itself."""

import functools
import os

from utils.data.errors import DataError
from utils.models.hub import offline, why_not_fetched

_fail = DataError.fail  # one line, exit 2 (utils/core/errors.py)


class Unreachable(ConnectionError):
    """The Hub cannot be reached now (utils/models/hub.py says why), found before asking datasets."""


@functools.cache  # one lookup a run, shared by the catalog (images or videos?) and the loader
def _hub(name, config, load):
    """`load_dataset` (load) or `load_dataset_builder` (not load) of a Hub name, read from the local cache when
    offline; the exception that stopped it, returned (and kept: an unreachable Hub is waited for once)."""
    import datasets

    if not offline() and not _maybe_cached(name) and (why := why_not_fetched()) is not None:
        return Unreachable(why)  # at once: datasets would retry each request for 23 s before saying so
    try:
        return datasets.load_dataset(name, config) if load else datasets.load_dataset_builder(name, config)
    except (ConnectionError, OSError, ValueError) as e:  # OSError also covers "no such repo"
        return e


def _maybe_cached(name):
    """Whether Hub dataset `name` ("owner/name" or "name") may be in a local cache: the Hub's (its files) or
    datasets' own (its prepared copy). A "maybe" is left to datasets, which finds it there without the network."""
    import datasets
    from datasets.naming import camelcase_to_snakecase
    from huggingface_hub import constants

    short = name.split("/")[-1]
    snake = camelcase_to_snakecase(short)
    hub = [entry for entry in _entries(constants.HF_HUB_CACHE) if entry.startswith("datasets--")
           and entry.split("--")[-1] == short]
    own = [entry for entry in _entries(datasets.config.HF_DATASETS_CACHE)
           if entry in (short, snake) or entry.endswith(f"___{snake}")]
    return bool(hub or own)


def _entries(folder):
    try:
        return os.listdir(folder)
    except OSError:
        return []


def hub_features(name, config):
    """The features a Hub dataset declares (its card online, the cache's record offline: nothing downloaded),
    else those of the dataset loaded (from the cache, and kept for the loader); {} when it cannot be reached."""
    builder = _hub(name, config, False)
    if isinstance(builder, Exception):
        return {}
    if builder.info.features is not None:
        return builder.info.features
    if getattr(builder, "BASE_FEATURE", None) is not None:  # videofolder, imagefolder...: typed by its files
        return {builder.BASE_FEATURE.__name__.lower(): builder.BASE_FEATURE()}
    loaded = _hub(name, config, True)
    return {} if isinstance(loaded, Exception) else next(iter(loaded.values())).features


def load_hub(name, config):
    import datasets

    for load in (False, True):  # the builder first: a name that cannot be reached fails there, once
        got = _hub(name, config, load)
        if isinstance(got, (ConnectionError, OSError)):  # offline and not cached, or no such repo
            cache = os.environ.get("HF_DATASETS_CACHE") or datasets.config.HF_DATASETS_CACHE
            _fail(f"dataset: could not reach {name!r} on the Hub and it is not in the local cache ({cache}): "
                  f"download it once where there is network (python -c \"import datasets; "
                  f"datasets.load_dataset('{name}')\") and copy that cache here, or point HF_DATASETS_CACHE at a "
                  f"cache that holds it and set HF_HUB_OFFLINE=1 "
                  f"[{got if isinstance(got, Unreachable) else type(got).__name__}]")
        if isinstance(got, ValueError):  # e.g. a config name that does not exist
            _fail(f"dataset: {name!r}: {str(got).splitlines()[0]}")
    return got
