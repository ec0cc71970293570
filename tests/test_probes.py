"""--probe linear|knn: a frozen backbone's features, cached once with the eval transform (the same bytes on 1 and 2
processes, a killed pass resumed to the same cache), then the exact kNN vote (ties by index, equal to a brute force
here) or a sweep of linear heads (equal to the same heads trained on features computed on the fly); the run folder an
ordinary one that predict.py scores; what cannot apply is one line."""

import math

import numpy as np
import pytest
import torch
from conftest import main_fails, make_folder, parse_fails, read_json, run_main, snapshot
from ranks import ranks_killed, ranks_ok, run_ranks

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

# 301 training digits and 101 validation ones at 16 px, batches of 8: cache files of 64 samples, the last ones ragged
# (5 training files, 2 validation ones: on 2 processes the second rank computes 2 and 1 of them). A random resnet18.
SMALL = ["--max_train_samples", "301", "--max_val_samples", "101", "--image_size", "16", "--batch_size", "8",
         "--top_losses", "101", "--no_plots"]


def cache(out, split):
    from safetensors.numpy import load_file

    files = sorted((out / "features" / split).glob("chunk_*.safetensors"))
    return np.concatenate([load_file(f)["features"] for f in files])


def cache_bytes(out):
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "features").rglob("*.safetensors"))}


def brute_force_knn(train, labels, queries, classes, k, temperature):
    """Each query against each training sample on its own (float64), the k most similar by (similarity, index)."""
    bank = train / np.linalg.norm(train, axis=1, keepdims=True).astype(np.float64)
    rows = []
    for query in queries / np.linalg.norm(queries, axis=1, keepdims=True):
        similarity = [float(np.dot(query, sample)) for sample in bank]
        votes = np.zeros(classes)
        for j in sorted(range(len(bank)), key=lambda j: (-similarity[j], j))[:k]:
            votes[labels[j]] += math.exp(similarity[j] / temperature)
        rows.append(votes / votes.sum())
    return np.asarray(rows)


def rows_of(out):
    """top_losses.csv (every validation sample, --top_losses 101), by validation index."""
    import csv

    with open(out / "top_losses.csv", newline="") as f:
        return sorted(csv.DictReader(f), key=lambda row: int(row["index"]))


def test_nearest_breaks_ties_by_the_lower_index_and_votes_as_a_brute_force():
    from utils.evaluation.knn import knn_log_probs, nearest

    generator = torch.Generator().manual_seed(0)
    similarity = torch.randint(0, 4, (50, 40), generator=generator).float()  # ties everywhere
    for k in (1, 3, 7, 40):
        found = nearest(similarity, k)
        for row, chosen in zip(similarity.tolist(), found.tolist()):
            assert sorted(chosen) == sorted(sorted(range(40), key=lambda j: (-row[j], j))[:k])
    bank = torch.nn.functional.normalize(torch.randn(40, 6, generator=generator), dim=1)
    bank[20:30] = bank[:10]  # the same vectors under other labels: the lower index wins the tie
    labels, queries = torch.arange(40) % 5, torch.nn.functional.normalize(torch.randn(9, 6, generator=generator), dim=1)
    queries[:3] = bank[:3]
    got = knn_log_probs(queries, bank, labels, 5, 4, 0.1).exp().numpy()
    np.testing.assert_allclose(got, brute_force_knn(bank.double().numpy(), labels.numpy(), queries.double().numpy(), 5,
                                                    4, 0.1), rtol=1e-4, atol=1e-6)


def test_the_sweep_trains_each_head_as_alone_and_a_tie_goes_to_the_first_in_sweep_order():
    from utils.training.probes import ProbeOptions, fit_linear

    generator = torch.Generator().manual_seed(1)
    labels = torch.arange(30) % 3
    train = torch.randn(30, 5, generator=generator) + 8 * torch.nn.functional.one_hot(labels, 5)  # separable
    options = ProbeOptions("linear", 20, 0.07, (0.01, 0.1), (0.0, 0.05))
    head, sweep, steps = fit_linear(train, labels, train[:12], labels[:12], 3, options, 4, 7, 3)
    assert [s[:2] for s in sweep] == [(0.01, 0.0), (0.01, 0.05), (0.1, 0.0), (0.1, 0.05)] and steps == 4 * 5
    assert all(top1 == 1.0 for *_, top1 in sweep) and (head.lr, head.weight_decay) == (0.01, 0.0)
    # one head alone, by torch's own Linear and SGD (decay on the weight, not the bias), the same batches
    layer = torch.nn.Linear(5, 3)
    torch.nn.init.zeros_(layer.weight), torch.nn.init.zeros_(layer.bias)
    optimizer = torch.optim.SGD([{"params": [layer.weight], "weight_decay": 0.05}, {"params": [layer.bias]}], lr=0.1,
                                momentum=0.9)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 20, eta_min=0)
    order = torch.Generator().manual_seed(3)
    for _ in range(4):
        for rows in torch.randperm(30, generator=order).split(7):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(layer(train[rows]), labels[rows]).backward()
            optimizer.step()
            schedule.step()
    alone, _, _ = fit_linear(train, labels, train[:12], labels[:12], 3,
                             ProbeOptions("linear", 20, 0.07, (0.1,), (0.05,)), 4, 7, 3)
    torch.testing.assert_close(alone.weight, layer.weight.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(alone.bias, layer.bias.detach(), rtol=1e-5, atol=1e-6)


def test_the_vote_in_blocks_shared_by_two_processes_is_the_vote_of_one(monkeypatch):
    """knn_scores' blocks of queries (3 of 256, the last ragged) computed by 2 processes, gathered in rank order (0 and
    2 on the first, 1 on the second), put back in block order: what 1 process computes."""
    from types import SimpleNamespace

    from utils.evaluation.knn import normalised
    from utils.run import probe
    from utils.training.probes import ProbeOptions

    generator = torch.Generator().manual_seed(2)
    queries, bank = (normalised(torch.randn(600, 8, generator=generator)),
                     normalised(torch.randn(90, 8, generator=generator)))
    labels, options = torch.arange(90) % 4, ProbeOptions("knn", 5, 0.07, (0.1,), (0.0,))

    def scores(rank, world, gathered):
        monkeypatch.setattr(probe, "gather_object", gathered)
        accelerator = SimpleNamespace(num_processes=world, process_index=rank, device=torch.device("cpu"))
        return probe.knn_scores(accelerator, queries, bank, labels, 4, options)

    shares = {}
    scores(1, 2, lambda mine: shares.setdefault(1, mine[0]) and [{}])
    assert sorted(shares[1]) == [1]
    two = scores(0, 2, lambda mine: [mine[0], shares[1]])
    assert torch.equal(two, scores(0, 1, lambda mine: mine)) and two.shape == (600, 4)


@pytest.mark.slow
def test_knn_is_the_same_on_one_and_two_processes_a_killed_pass_resumes_and_a_brute_force_agrees(tmp_path):
    from utils.config.options import parse_args
    from utils.config.settings import datasets_for

    one, two = tmp_path / "one", tmp_path / "two"
    results = run_main([*SMALL, "--probe", "knn", "--knn_k", "7", "--num_workers", "0", "--output_dir", one])
    argv = [*SMALL, "--probe", "knn", "--knn_k", "7", "--num_workers", "1", "--output_dir", two]
    ranks_killed(argv, "chunk:train/00002", nproc=2)  # rank 0's second file of the training split
    assert (two / "features" / "train" / "chunk_00002.safetensors").is_file()
    assert not (two / "results.json").exists() and not (two / "features" / "val").exists()
    kept = snapshot(two / "features" / "train")
    job = ranks_ok([*argv, "--resume", "latest"], nproc=2)
    assert all(snapshot(two / "features" / "train")[name] == seen for name, seen in kept.items() if name.endswith(
        "safetensors")), "a cached file was computed again"
    assert cache_bytes(one) == cache_bytes(two) and len(cache_bytes(one)) == 7
    assert rows_of(one) == rows_of(two) and read_json(two / "results.json")["val_top1"] == results["val_top1"]
    assert results["probe"] == {"probe": "knn", "k": 7, "temperature": 0.07} and results["global_step"] == 0
    # the brute force on the cache, with the split's own labels
    train, val, _, _ = datasets_for(parse_args([*SMALL, "--output_dir", str(tmp_path / "x")]))
    expected = brute_force_knn(cache(one, "train").astype(np.float64), np.asarray(train.dataset.labels),
                               cache(one, "val").astype(np.float64), 10, 7, 0.07)
    rows = rows_of(one)
    assert [int(row["predicted"]) for row in rows] == expected.argmax(axis=1).tolist()
    np.testing.assert_allclose([float(row["probability"]) for row in rows], expected.max(axis=1), atol=1e-5)
    assert results["val_top1"] == pytest.approx(np.mean(expected.argmax(axis=1) == np.asarray(val.dataset.labels)))
    # the cache is what the eval transform gives: the validation split's features computed here, on the fly
    assert_features_of(one, val, cache(one, "val"))
    # predict.py's model votes over the bank the run wrote into model/ and the run folder: the run's probabilities
    from utils.inference import EvalGraph, load_run

    run, model = load_run(one)
    with torch.no_grad():
        probs = EvalGraph(model, run.input)(pixels_of(val)).exp()
    np.testing.assert_allclose(probs.max(dim=1).values.numpy(), expected.max(axis=1), atol=1e-4)
    assert probs.argmax(dim=1).tolist() == expected.argmax(axis=1).tolist()
    assert (one / "model" / "knn_bank.safetensors").read_bytes() == (one / "knn_bank.safetensors").read_bytes()
    import predict

    with pytest.raises(SystemExit) as refused:  # the vote is no graph: one line, nothing written
        predict.main([str(one), "--export_onnx", str(tmp_path / "knn.onnx")])
    assert refused.value.code == 2 and not (tmp_path / "knn.onnx").exists()
    cached_before = sum(name.endswith(".safetensors") for name in kept)  # rank 0's two, and what rank 1 had done
    assert cached_before >= 2 and f"features: {cached_before} of 5 train files cached" in job.stdout, job.stdout
    assert "resume: a probe has no checkpoints; its feature pass continues" in job.stdout


def pixels_of(dataset):
    return torch.stack([dataset[i]["pixel_values"] for i in range(len(dataset))])


def assert_features_of(out, dataset, cached):
    """The cached features of `dataset` are those of the run's weights (model.safetensors, its classifier as it was
    built) on its items as the dataset gives them, computed here on the fly."""
    from utils.inference import EvalGraph
    from utils.run.trained import read_run
    from utils.models.features import Features
    from utils.models.libraries import build_model
    from utils.models.weights import read_state_dict

    run = read_run(out)
    model = build_model(run.model, num_classes=len(run.classes), video=False, class_names=run.classes).eval()
    model.load_state_dict(read_state_dict(out / "model.safetensors"))
    with Features(model, run.model) as features, torch.no_grad():
        EvalGraph(model, run.input)(pixels_of(dataset))
        np.testing.assert_allclose(features.take(len(dataset)).numpy(), cached, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Noisy one-colour images of 3 classes at 24x20: 50 training ones (odd class counts), 13 validation ones."""
    root = tmp_path_factory.mktemp("probe_images")
    make_folder(root / "tr", {"cat": 20, "dog": 17, "eel": 13}, noise=60)
    make_folder(root / "va", {"cat": 5, "dog": 4, "eel": 4}, noise=60)
    return root


def folder_job(folders, out, *extra):
    return ["--train_dir", folders / "tr", "--val_dir", folders / "va", "--image_size", "16", "--batch_size", "4",
            "--epochs", "3", "--num_workers", "0", "--probe", "linear", "--probe_lrs", "0.003", "0.03", "0.3",
            "--probe_weight_decays", "0", "0.01", "--output_dir", out, *extra]


@pytest.mark.slow
def test_the_linear_probe_on_the_cache_is_the_head_trained_on_features_computed_on_the_fly(folders, tmp_path):
    from safetensors.torch import load_file

    from utils.config.options import flat_namespace, parse, parse_args
    from utils.config.settings import datasets_for
    from utils.inference import EvalGraph, load_run
    from utils.training.probes import fit_linear

    out = tmp_path / "one"
    results = run_main(folder_job(folders, out))
    # The training images as the validation sees them (a run whose validation split is the training folder), and the
    # validation images; their features by the run's frozen weights, computed here; the same sweep trained on them.
    settings = parse([str(a) for a in folder_job(folders, tmp_path / "x")[:-2]] + ["--val_dir", str(folders / "tr")])
    _, train, _, _ = datasets_for(flat_namespace(settings))
    _, val, _, _ = datasets_for(parse_args([str(a) for a in folder_job(folders, tmp_path / "y")]))
    features = {}
    for name, dataset in (("train", train), ("val", val)):
        assert_features_of(out, dataset, cache(out, name))
        features[name] = torch.as_tensor(cache(out, name))
    head, sweep, steps = fit_linear(features["train"], torch.as_tensor(train.dataset.labels), features["val"],
                                    torch.as_tensor(val.dataset.labels), 3, settings.probe, 3, 4, 0)
    weights = load_file(out / "model.safetensors")
    assert torch.equal(weights["fc.weight"], head.weight) and torch.equal(weights["fc.bias"], head.bias)
    probe = results["probe"]
    assert (probe["lr"], probe["weight_decay"]) == (head.lr, head.weight_decay) and results["global_step"] == steps
    assert [(row["lr"], row["weight_decay"], row["val_top1"]) for row in probe["sweep"]] == sweep and len(sweep) == 6
    assert head.val_top1 == max(top1 for _, _, top1 in sweep) == pytest.approx(results["val_top1"])
    # an ordinary model: predict.py's graph scores the validation split as the run did
    run, model = load_run(out)
    with torch.no_grad():
        predicted = EvalGraph(model, run.input)(pixels_of(val)).argmax(dim=1)
    assert ((predicted == torch.as_tensor(val.dataset.labels)).float().mean().item()
            == pytest.approx(results["val_top1"]))
    # two processes with a worker each: the same cache, the same head
    ranks_ok(folder_job(folders, tmp_path / "two", "--num_workers", "1"), nproc=2)
    assert cache_bytes(tmp_path / "two") == cache_bytes(out)
    assert load_file(tmp_path / "two" / "model.safetensors")["fc.weight"].equal(weights["fc.weight"])
    # SIGTERM at the third batch of the first cache file (of 8): that file is finished and written, then the run stops
    # (exit 75); resumed, the same cache and head
    term = folder_job(folders, tmp_path / "term", "--num_workers", "1")
    stopped = run_ranks(["features:3", "TERM", "group", "0", *term], nproc=1, target="helpers.signal_at:main")
    assert stopped.returncode == 75, stopped.report()
    assert [p.name for p in (tmp_path / "term" / "features" / "train").iterdir()] == ["chunk_00000.safetensors"]
    ranks_ok([*term, "--resume", "latest"], nproc=1)
    assert cache_bytes(tmp_path / "term") == cache_bytes(out)
    assert load_file(tmp_path / "term" / "model.safetensors")["fc.weight"].equal(weights["fc.weight"])


@pytest.mark.slow
def test_a_broken_file_or_another_runs_cache_is_one_line_and_nothing_is_lost(folders, tmp_path, capsys):
    import shutil

    broken = tmp_path / "data"
    shutil.copytree(folders, broken)
    (broken / "tr" / "dog" / "zz_broken.png").write_bytes(b"not an image")
    out = tmp_path / "run"
    code, err = main_fails(folder_job(broken, out), capsys)
    assert code == 2 and err.strip().splitlines()[-1].startswith(
        f"train_classification.py: error: probe: 1 train file(s) could not be decoded, the first "
        f"{broken / 'tr' / 'dog' / 'zz_broken.png'} ("), err
    results = run_main(folder_job(broken, tmp_path / "skipped", "--skip_bad_images"))
    assert results["train_samples"] == 51 and results["val_samples"] == 13
    assert results["skipped_images"] == [str(broken / "tr" / "dog" / "zz_broken.png")]
    # the broken file left out, each other sample with its own label: the head the clean folder's run trains (the
    # same samples in the same shuffled order; features within rounding of a batch holding the blank)
    clean = run_main(folder_job(folders, tmp_path / "clean"))
    assert results["val_top1"] == clean["val_top1"] and results["probe"]["lr"] == clean["probe"]["lr"]
    from safetensors.torch import load_file

    torch.testing.assert_close(load_file(tmp_path / "skipped" / "model.safetensors")["fc.weight"],
                               load_file(tmp_path / "clean" / "model.safetensors")["fc.weight"], rtol=1e-3, atol=1e-4)
    cached = cache_bytes(tmp_path / "skipped")
    code, err = main_fails(folder_job(broken, tmp_path / "skipped", "--skip_bad_images", "--resume", "latest",
                                      "--image_size", "24"), capsys)
    assert code == 2 and "holds features of other weights, input, data or --batch_size" in err.strip().splitlines()[-1]
    code, err = main_fails(folder_job(broken, tmp_path / "skipped", "--skip_bad_images", "--resume", "latest",
                                      "--val_crop_size", "14", "--val_resize_size", "18"), capsys)  # 16 in 18 cached
    assert code == 2 and "holds features of other weights, input, data or --batch_size" in err.strip().splitlines()[-1]
    code, err = main_fails(folder_job(broken, tmp_path / "skipped", "--skip_bad_images", "--resume", "latest",
                                      "--seed", "1"), capsys)  # another random backbone, all else the same
    assert code == 2 and "holds features of other weights" in err.strip().splitlines()[-1]
    assert cache_bytes(tmp_path / "skipped") == cached
    code, err = main_fails(["--dataset", "multi_digits", "--probe", "knn", "--output_dir", tmp_path / "multi"], capsys)
    assert code == 2 and "probe: votes or fits one class a sample" in err.strip().splitlines()[-1]


@pytest.mark.parametrize("argv, said", [
    (["--knn_k", "5"], "knn_k: sets the kNN probe: add --probe knn"),
    (["--probe_lrs", "0.1"], "probe_lrs: sets the linear probe's sweep: add --probe linear"),
    (["--probe", "linear", "--probe_lrs", "0"], "probe_lrs: must each be > 0"),
    (["--probe", "knn", "--knn_k", "0"], "knn_k: must be >= 1"),
    (["--probe", "linear", "--mixup_alpha", "0.2"], "mixup_alpha: augments training images"),
    (["--probe", "linear", "--lora", "4"], "lora: is not available with --probe"),
    (["--probe", "linear", "--lr", "0.5"], "lr: sets the model's training"),
    (["--probe", "linear", "--lr_milestones", "3"], "lr_milestones: sets the model's training"),
    (["--probe", "knn", "--epochs", "5"], "epochs: sets the linear probe's training; --probe knn trains nothing"),
    (["--probe", "knn", "--dataset", "moving_digits"], "probe: caches image features: not available for video"),
    (["--probe", "knn", "--resume", "runs/x/checkpoints/epoch_1"], "resume"),
    (["--probe", "knn", "--folds", "3", "--fold", "0"], "folds: a fold's predictions are its model's classifier's"),
])
def test_what_a_probe_cannot_apply_is_one_line(argv, said, capsys):
    code, lines = parse_fails(argv, capsys)
    assert code == 2 and len(lines) == 1 and said in lines[0], lines


@pytest.mark.parametrize("probe, eval_only, said", [
    ("knn", False, "--probe knn on the frozen model's features -> out"),  # it said "23 steps/epoch": it takes none
    (None, True, "--eval_only: scored, not trained -> out"),
    (None, False, "23 steps/epoch -> out"),
])
def test_the_start_up_line_says_what_the_run_does(probe, eval_only, said):
    from types import SimpleNamespace

    from utils.reporting.progress import start_line

    settings = SimpleNamespace(probe=SimpleNamespace(probe=probe), source_name="digits", sample_unit="images",
                               model=SimpleNamespace(name="resnet18"), folder=SimpleNamespace(eval_only=eval_only))
    job = SimpleNamespace(settings=settings, accelerator=SimpleNamespace(num_processes=1, device=torch.device("cpu")),
                          class_names=["a", "b"],
                          task=SimpleNamespace(note=""), steps_per_epoch=23, out="out")
    line = start_line(job, 1437, 360, 2)
    assert line.startswith("resnet18 on digits: 1437 train / 360 val images, 2 classes, 1 process(es) on cpu")
    assert line.endswith(f", {said}"), line
