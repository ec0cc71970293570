"""A download the run needs, from a host that cannot be reached: said in one line at once, not after the libraries'
retries (huggingface_hub asks five times a file, 23 s of back-off each; a resolver without an answer, longer).

utils/core/network.py asks the host (or its proxy) for a TCP connection, in 3 s at most; the model libraries and the
Hub datasets ask it before fetching what is not cached (utils/models/hub.py). Tested against ports of this machine:
one that listens, one that refuses; nothing here reaches outside it.
"""

import socket
import time

import pytest
from conftest import TINY, main_fails, runs_in_one_process

from utils.core import network


@pytest.fixture
def listening():
    """A port of this machine that accepts connections."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.fixture
def closed():
    """A port of this machine that refuses connections (bound once, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for key in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                "NO_PROXY"):
        monkeypatch.delenv(key, raising=False)
    network._connect.cache_clear()


def test_a_host_that_answers_and_one_that_refuses(listening, closed):
    assert network.unreachable(f"http://127.0.0.1:{listening}/file") is None
    why = network.unreachable(f"https://127.0.0.1:{closed}/file")
    assert why == f"127.0.0.1:{closed} cannot be reached (Connection refused)"
    assert network.unreachable("https://no-such-host.invalid/weights.pth").startswith(
        "no-such-host.invalid:443 cannot be reached (")


def test_through_a_proxy_the_proxy_is_asked_unless_the_host_is_bypassed(listening, closed, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{listening}")
    assert network.unreachable("https://no-such-host.invalid/weights.pth") is None  # the proxy answers for it
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert network.unreachable(f"https://127.0.0.1:{closed}/file").startswith(f"127.0.0.1:{closed} cannot")


def test_a_host_that_never_answers_is_given_up_on_after_the_probe_time(monkeypatch):
    monkeypatch.setattr(network, "PROBE_S", 0.2)
    def silent(*args, **kwargs):  # a firewall that drops the packets: the answer comes (as an error) much later
        time.sleep(1)
        raise OSError("too late")

    monkeypatch.setattr(network.socket, "create_connection", silent)
    start = time.monotonic()
    assert network.unreachable("https://example.invalid/x") == ("example.invalid:443 cannot be reached (no answer "
                                                                "within 0.2 s)")
    assert time.monotonic() - start < 2


def test_torchvision_weights_not_cached_from_an_unreachable_host_are_one_line_without_a_download(
        tmp_path, capsys, monkeypatch):
    import torchvision

    from utils.models import torchvision_library

    def no_download(*args, **kwargs):
        raise AssertionError("a download was attempted")

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torchvision_library, "unreachable", lambda url: "download.pytorch.org:443 cannot be reached "
                                                                        "(Name or service not known)")
    monkeypatch.setattr(torchvision.models.ResNet18_Weights.DEFAULT.__class__, "get_state_dict", no_download)
    code, err = main_fails([*TINY, "--model", "resnet18", "--pretrained", "--output_dir", tmp_path / "run"], capsys)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and len(errors) == 1, err
    assert "is not in the torch hub cache" in errors[0] and "(download.pytorch.org:443 cannot be reached (Name or " \
                                                           "service not known))" in errors[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_hub_unreachable_without_hf_hub_offline_is_one_line_at_once_for_models_weights_and_datasets(
        tmp_path, closed):
    # A fresh interpreter (huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE at import), the Hub at a port that
    # refuses, HF_HUB_OFFLINE unset, empty caches: before, each run retried for 23 s a file, then (hf/) a traceback.
    home = tmp_path / "hf_home"
    env = {"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), "HF_DATASETS_CACHE": str(home / "datasets"),
           "HF_ENDPOINT": f"http://127.0.0.1:{closed}", "HF_HUB_OFFLINE": "0"}
    tiny = [*TINY, "--epochs", "1"]
    runs = [[*tiny, "--model", "hf/google/vit-base-patch16-224", "--output_dir", tmp_path / "hf"],
            [*tiny, "--model", "timm/resnet18.a1_in1k", "--pretrained", "--output_dir", tmp_path / "timm"],
            ["--dataset", "tester/not-cached", "--output_dir", tmp_path / "dataset"],
            ["--dataset", "tester/not-cached", "--streaming", "--output_dir", tmp_path / "stream"]]
    said = [f"hf/google/vit-base-patch16-224: not in the Hugging Face cache and 127.0.0.1:{closed} cannot be reached "
            f"(Connection refused); download it", "pretrained: the weights of timm/resnet18.a1_in1k are not in the "
            f"Hugging Face cache and could not be downloaded (127.0.0.1:{closed} cannot be reached (Connection "
            f"refused))", f"set HF_HUB_OFFLINE=1 [127.0.0.1:{closed} cannot be reached (Connection refused)]",
            f"dataset: cannot stream 'tester/not-cached': 127.0.0.1:{closed} cannot be reached (Connection refused)"]
    for run, words, name in zip(runs_in_one_process(runs, env, tmp_path), said, ("hf", "timm", "dataset", "stream")):
        errors = [line for line in run["stderr"].splitlines() if "error:" in line]
        assert run["code"] == 2 and len(errors) == 1 and words in errors[0], run["stderr"][-3000:]
        assert "Retrying" not in run["stderr"] and "Traceback" not in run["stderr"]
        assert not (tmp_path / name).exists()


def test_offline_the_hub_is_not_asked(monkeypatch):
    from utils.models.hub import why_not_fetched

    monkeypatch.setattr(network, "_connect", lambda host, port: pytest.fail(f"asked {host}:{port}"))
    assert why_not_fetched() == "HF_HUB_OFFLINE is set"  # (conftest sets it, as the suite runs offline)


def test_a_hub_dataset_that_may_be_cached_is_left_to_datasets_when_the_hub_cannot_be_reached(tmp_path, monkeypatch):
    """The Hub unreachable and HF_HUB_OFFLINE unset: a dataset not cached is refused at once; one that may be in a
    cache (the Hub's files, or datasets' own prepared copy, by either form of its name) is asked of datasets, which
    reads it there."""
    import datasets
    from huggingface_hub import constants

    from utils.data.sources import hub

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.setattr(hub, "offline", lambda: False)
    monkeypatch.setattr(hub, "why_not_fetched", lambda: "huggingface.co:443 cannot be reached (refused)")
    monkeypatch.setattr(datasets, "load_dataset_builder", lambda name, config: f"the builder of {name}")
    hub._hub.cache_clear()
    (tmp_path / "hub" / "datasets--tester--on-the-hub").mkdir(parents=True)
    (tmp_path / "datasets" / "tester___prepared_here").mkdir(parents=True)
    for name in ("tester/on-the-hub", "tester/PreparedHere"):
        assert hub._hub(name, None, False) == f"the builder of {name}"
    missing = hub._hub("tester/nowhere", None, False)
    assert isinstance(missing, hub.Unreachable) and str(missing) == "huggingface.co:443 cannot be reached (refused)"
    hub._hub.cache_clear()
