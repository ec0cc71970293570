"""The Hugging Face Hub as a run reaches it (hf/ models, timm's weights, Hub datasets): whether what it needs is
cached, and, when it is not, why it cannot be fetched now, asked before a library spends a minute retrying
(utils/core/network.py)."""

from utils.core.network import unreachable


def offline():
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set, as huggingface_hub reads it."""
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE


def why_not_fetched(url=None):
    """Why a file that is not cached cannot be fetched from the Hub (or from `url`, where weights live elsewhere) now:
    "HF_HUB_OFFLINE is set", or "<host>:<port> cannot be reached (<reason>)"; None when it can be asked for."""
    from huggingface_hub import constants

    if url is None and offline():
        return "HF_HUB_OFFLINE is set"
    return unreachable(url or constants.ENDPOINT)


def cached_file(repo, filename, repo_type="model"):
    """Whether `filename` of Hub repository `repo` is in the local cache."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo, filename, repo_type=repo_type), str)


def cached_models():
    """The model repositories in the local cache, by id."""
    try:
        from huggingface_hub import scan_cache_dir

        return sorted(r.repo_id for r in scan_cache_dir().repos if r.repo_type == "model")
    except Exception:  # no cache yet
        return []
