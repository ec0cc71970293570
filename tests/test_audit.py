"""audit.py: copies within and across the splits, conflicts, groups, unusable images and outliers found before
training, the same on 1 and 2 processes and after a kill, and what a run makes of them (--exclude, --audit)."""

import csv
import io
import json
import signal
from pathlib import Path

import numpy as np
import pytest

from conftest import SMALL_MODEL, make_video, read_json, reset_accelerate_state, run_main
from ranks import ranks_killed, ranks_ok, run_ranks

pytestmark = pytest.mark.slow
BATCH = ["--batch_size", "5", "--num_workers", "1"]  # cache files of 40: 48 training samples make two, the last odd


def audit_main(argv):
    """audit.py in this process (a 1-process launch): its summary; Accelerate's singletons reset after."""
    import audit

    try:
        return audit.main([str(a) for a in argv])
    finally:
        reset_accelerate_state()


def audit_fails(argv, capsys):
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        audit_main(argv)
    assert signal.getsignal(signal.SIGTERM) == handler  # given back on the way out too
    return stopped.value.code, capsys.readouterr().err.strip().splitlines()


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def near(image, kind):
    from PIL import Image, ImageEnhance

    w, h = image.size
    if kind == "resized":
        return image.resize((48, 48), Image.BICUBIC)
    if kind == "jpeg":
        return jpeg(image)
    if kind == "cropped":
        return image.crop((1, 0, w - 1, h - 2))  # 5 % of the side off, not centred
    return ImageEnhance.Brightness(image).enhance(1.3)


def jpeg(image):
    from PIL import Image

    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=70)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


@pytest.fixture(scope="module")
def injected(tmp_path_factory):
    """Folders of 40 training and 20 validation digits with problems put in them; what was put where ({kind:
    [(path, path)]} of pairs, {path: kind} of single images), as audit.py names samples (absolute paths)."""
    from PIL import Image

    from utils.data.sources.digits import load_digits_dataset

    root = tmp_path_factory.mktemp("audit")
    splits = load_digits_dataset()
    files = {}
    for split, name, count in (("train", "train", 40), ("val", "validation", 20)):
        files[split] = []
        for i, row in enumerate(splits[name].select(range(count))):
            path = root / split / str(row["label"]) / f"{i:03d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            row["image"].save(path)
            files[split].append((path, row["label"], row["image"]))
    pairs, singles = {"near_copy": [], "exact_copy": [], "conflict": []}, {}
    for n, kind in enumerate(("resized", "jpeg", "cropped", "brightened")):  # across, both ways
        source, target = ("val", "train") if n % 2 == 0 else ("train", "val")
        path, label, image = files[source][n]
        copy = root / target / str(label) / f"near_{kind}.png"
        near(image, kind).save(copy)
        pairs["near_copy"].append((path, copy))
    path, label, image = files["val"][5]
    image.save(root / "train" / str(label) / "exact.bmp")  # other bytes, the same pixels
    pairs["exact_copy"].append((path, root / "train" / str(label) / "exact.bmp"))
    jpeg(image).save(root / "train" / str(label) / "near_jpeg_too.png")  # a second copy of it: two findings name it
    pairs["near_copy"].append((path, root / "train" / str(label) / "near_jpeg_too.png"))
    path, label, image = files["train"][6]
    image.save(root / "val" / str((label + 1) % 10) / "relabelled.png")  # the same image, another class
    pairs["conflict"].append((path, root / "val" / str((label + 1) % 10) / "relabelled.png"))
    path, label, image = files["train"][7]
    image.save(root / "train" / str(label) / "again.png")  # a copy within training
    pairs["within"] = [(path, root / "train" / str(label) / "again.png")]
    path, label, image = files["train"][10]
    image.save(root / "train" / str((label + 2) % 10) / "mislabelled.png")  # and one under another class
    pairs["within_conflict"] = [(path, root / "train" / str((label + 2) % 10) / "mislabelled.png")]
    for split, name, value in (("train", "blank", 0), ("val", "grey", 128), ("val", "blank", 0)):
        Image.new("RGB", (32, 32), (value,) * 3).save(root / split / "3" / f"{name}.png")
        singles[root / split / "3" / f"{name}.png"] = "constant"
    dark = (np.asarray(files["train"][8][2]) * 0.08).astype(np.uint8)  # a digit, barely lit
    dim = root / "train" / str(files["train"][8][1]) / "dark.png"  # (its own class: a near copy, not a conflict)
    Image.fromarray(dark).save(dim)
    singles[dim] = "dark"
    (root / "train" / "5" / "broken.png").write_bytes(files["train"][0][0].read_bytes()[:50])
    singles[root / "train" / "5" / "broken.png"] = "unreadable"
    noise = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(noise).save(root / "train" / "2" / "noise.png")  # no digit at all: an outlier of class 2
    every = [q for q in sorted(root.rglob("*.*")) if q.parent.parent.name in ("train", "val")]
    patient = {files["train"][9][0], files["val"][9][0]}  # one patient's images in both splits
    groups = ["sample,group"] + [f"{q},{'patient_9' if q in patient else q.parent.parent.name + '_' + q.stem}"
                                 for q in every]
    pairs["group"] = [(files["train"][9][0], files["val"][9][0])]
    (root / "groups.csv").write_text("\n".join(groups) + "\n")
    data = ["--train_dir", root / "train", "--val_dir", root / "val", "--image_size", "32", "--skip_bad_images"]
    return root, data, {k: [(str(a), str(b)) for a, b in v] for k, v in pairs.items()}, \
        {str(p): k for p, k in singles.items()}


@pytest.fixture(scope="module")
def audited(injected, tmp_path_factory):
    """The injected folders audited on one process, pixels only, with their groups."""
    root, data, _, _ = injected
    out = tmp_path_factory.mktemp("audited") / "audit"
    audit_main(["--output", out, "--groups", root / "groups.csv", *BATCH, "--", *data])
    return out


def test_each_injected_problem_is_found_as_its_kind_and_the_pairs_across_the_splits_come_first(injected, audited):
    root, _, pairs, singles = injected
    rows = read_csv(audited / "findings.csv")
    found = {frozenset((r["sample"], r["other_sample"])): r for r in rows if r["other_sample"]}
    for kind in ("near_copy", "exact_copy", "conflict"):
        for a, b in pairs[kind]:
            assert found[frozenset((a, b))]["kind"] == kind and found[frozenset((a, b))]["across"] == "1", (kind, a, b)
    a, b = pairs["within"][0]
    assert found[frozenset((a, b))]["kind"] == "exact_copy" and found[frozenset((a, b))]["across"] == "0"
    a, b = pairs["within_conflict"][0]
    assert found[frozenset((a, b))]["kind"] == "conflict" and found[frozenset((a, b))]["across"] == "0"
    # blank images (one in each split, the same pixels) are constant, never a copy or a conflict
    assert not [pair for pair in found if pair & {p for p, kind in singles.items() if kind == "constant"}]
    alone = {r["sample"]: r["kind"] for r in rows if not r["other_sample"]}
    assert {path: alone.get(path) for path in singles} == singles
    assert [(r["sample"], r["other_sample"]) for r in rows if r["kind"] == "group"] == pairs["group"]
    # every finding across the splits ranks above every finding within one; a conflict above the copies
    across = [int(r["across"]) for r in rows]
    assert across == sorted(across, reverse=True) and rows[0]["kind"] == "conflict"
    assert [int(r["rank"]) for r in rows] == list(range(1, len(rows) + 1))
    # leaked.csv: the validation side of every finding across; exclude.csv: their training side, the later copy
    # within training, the unreadable and blank training images; neither the dark one nor a validation image
    leaked = {r["sample"] for r in read_csv(audited / "leaked.csv")}
    wanted = {p for kind in ("near_copy", "exact_copy", "conflict", "group") for pair in pairs[kind] for p in pair
              if "/val/" in p}
    assert leaked == wanted
    excluded = {r["sample"] for r in read_csv(audited / "exclude.csv")}
    across = {p for kind in ("near_copy", "exact_copy", "conflict", "group") for pair in pairs[kind] for p in pair
              if "/train/" in p}
    assert excluded == across | {pairs["within"][0][1], *pairs["within_conflict"][0],
                                 str(root / "train" / "3" / "blank.png"), str(root / "train" / "5" / "broken.png")}
    summary = read_json(audited / "summary.json")
    assert summary["samples"] == {split: len(list((root / split).rglob("*.*"))) for split in ("train", "val")}
    assert summary["leaked_validation"] == len(leaked) and summary["excluded_training"] == len(excluded)
    assert summary["leaked_share"] == round(len(leaked) / summary["samples"]["val"], 6)
    # each listed sample with the kind and rank of the first finding that names it
    first = {}
    for r in rows:
        for name in (r["sample"], r["other_sample"]):
            first.setdefault(name, (r["kind"], r["rank"]))
    for listed in ("leaked.csv", "exclude.csv"):
        assert all((r["kind"], r["rank"]) == first[r["sample"]] for r in read_csv(audited / listed)), listed
    for kind, count in summary["found"].items():
        if isinstance(count, dict):
            assert count == {"across": sum(r["kind"] == kind and r["across"] == "1" for r in rows),
                             "within": sum(r["kind"] == kind and r["across"] == "0" for r in rows)}, kind
        else:
            assert count == sum(r["kind"] == kind for r in rows), kind


def test_the_page_shows_each_finding_with_its_pictures_in_a_browser(audited, tmp_path):
    """audit.html in headless chromium: every picture decodes (two a pair), nothing is fetched, nothing overflows a
    1200 px window."""
    from helpers.browser import chromium, measured

    page = (audited / "audit.html").read_text()
    assert "<script" not in page and "http" not in page
    rows = read_csv(audited / "findings.csv")
    pictures = sum(2 if r["other_sample"] else 1 for r in rows)
    seen = measured(chromium(), page, "document.title = document.images.length + ' ' + [...document.images].filter("
                    "i => !(i.complete && i.naturalWidth > 0)).length + ' ' + (document.documentElement.scrollWidth "
                    "<= 1200)", tmp_path)
    assert seen == f"{pictures} 0 true"


def test_two_processes_write_the_same_files_and_cache_as_one(injected, audited, tmp_path):
    root, data, _, _ = injected
    ranks_ok(["--output", tmp_path / "two", "--groups", root / "groups.csv", *BATCH, "--", *data], nproc=2,
             target="audit:main")
    for name in ("findings.csv", "exclude.csv", "leaked.csv", "summary.json", "audit.html"):
        assert (tmp_path / "two" / name).read_bytes() == (audited / name).read_bytes(), name
    one = sorted((audited / "cache").rglob("*.safetensors"))
    assert len(one) == 2 + 1 and [p.read_bytes() for p in one] == \
        [(tmp_path / "two" / p.relative_to(audited)).read_bytes() for p in one]


@pytest.mark.parametrize("signame", ["KILL", "TERM"])
def test_an_audit_stopped_during_its_pass_goes_on_from_the_files_it_cached(injected, audited, tmp_path, capsys,
                                                                           signame):
    """SIGKILL (a crash, the OOM killer) or SIGTERM to the process group (as SLURM and torchrun send it: exit 75 and
    a line) right after the first cache file: the same command goes on from it, untouched, to the same findings."""
    root, data, _, _ = injected
    argv = ["--output", tmp_path / "stopped", "--groups", root / "groups.csv", *BATCH, "--", *data]
    if signame == "KILL":
        ranks_killed(["audit.py", *argv], "chunk:train/00000")
    else:
        job = run_ranks(["chunk:train/00000", "TERM", "group", "0", "audit.py", *argv], nproc=1,
                        target="helpers.signal_at:main")
        assert job.returncode == 75 and "interrupted by SIGTERM during the train looks: cached up to here; run the " \
            "same command again to go on" in job.stderr, job.report()
    kept = tmp_path / "stopped" / "cache" / "train" / "chunk_00000.safetensors"
    before = kept.stat().st_mtime_ns
    assert not (tmp_path / "stopped" / "findings.csv").exists()
    handler = signal.getsignal(signal.SIGTERM)
    audit_main(argv)
    assert signal.getsignal(signal.SIGTERM) == handler  # given back once the audit ends
    assert "looks: 1 of 2 train files cached" in capsys.readouterr().out
    assert kept.stat().st_mtime_ns == before
    for name in ("findings.csv", "summary.json"):
        assert (tmp_path / "stopped" / name).read_bytes() == (audited / name).read_bytes()


@pytest.fixture(scope="module")
def trained(injected, tmp_path_factory):
    """A run of SMALL_MODEL on the injected folders, one epoch."""
    _, data, _, _ = injected
    out = tmp_path_factory.mktemp("trained") / "run"
    run_main([*data, "--model", SMALL_MODEL, "--epochs", "1", "--num_workers", "0", "--no_plots", "--output_dir", out])
    return out


def test_a_runs_features_find_the_outlier_and_a_run_trains_without_the_leaks_and_scores_without_them(
        injected, trained, tmp_path):
    """The run's own data, audited with its features (no options after --): the noise image is the farthest outlier,
    the copies are found again. Trained with --exclude and --audit: the excluded samples are not trained on, and
    results.json's leak_free figures are those of the validation split without leaked.csv's samples."""
    root, data, pairs, _ = injected
    out = tmp_path / "audit"
    summary = audit_main([trained, "--output", out, *BATCH])
    assert summary["model"] == SMALL_MODEL
    rows = read_csv(out / "findings.csv")
    outliers = [r["sample"] for r in rows if r["kind"] == "outlier"]  # the farthest first
    assert outliers[0] == str(root / "train" / "2" / "noise.png"), outliers
    found = {frozenset((r["sample"], r["other_sample"])) for r in rows}
    assert all(frozenset(pair) in found for kind in ("near_copy", "exact_copy", "conflict") for pair in pairs[kind])
    from safetensors.torch import load_file

    assert load_file(out / "cache" / "train" / "chunk_00000.safetensors")["features"].shape[0] == 40
    results = run_main([*data, "--model", SMALL_MODEL, "--epochs", "1", "--num_workers", "0", "--no_plots",
                        "--exclude", out / "exclude.csv", "--audit", out, "--output_dir", tmp_path / "clean"])
    left_out = read_csv(out / "leaked.csv")
    train = len(list((root / "train").rglob("*.*")))
    assert results["train_samples"] == train - len(read_csv(out / "exclude.csv"))
    free = results["leak_free"]
    assert free["audit"] == str(out) and free["left_out"] == len(left_out) > 0
    assert free["val_samples"] == len(list((root / "val").rglob("*.*"))) - len(left_out)


def test_leak_free_figures_are_those_of_the_split_without_the_named_samples(tmp_path):
    """A hand-made leaked.csv naming every validation digit of class 0 (by its index, as the digits are named): the
    leak-free figures have the whole split's accuracy on every other class and no class 0; top-1 is recomputed."""
    from utils.data.sources.digits import load_digits_dataset

    labels = load_digits_dataset()["validation"]["label"]
    folder = tmp_path / "audit"
    folder.mkdir()
    zeros = [i for i, label in enumerate(labels) if label == 0]
    (folder / "leaked.csv").write_text("sample,kind,rank\n" + "".join(f"{i},near_copy,1\n" for i in zeros))
    results = run_main(["--model", SMALL_MODEL, "--epochs", "1", "--num_workers", "0", "--no_plots",
                        "--max_train_samples", "200", "--audit", folder, "--output_dir", tmp_path / "run"])
    free = results["leak_free"]
    assert free["left_out"] == len(zeros) and free["val_samples"] == len(labels) - len(zeros)
    for c in range(1, 10):
        assert free[f"val_class_acc/{c}"] == pytest.approx(results["per_class_accuracy"][str(c)])
    (folder / "leaked.csv").write_text("sample,kind,rank\n")  # an audit that found no leak
    none = run_main(["--model", SMALL_MODEL, "--epochs", "1", "--num_workers", "0", "--no_plots",
                     "--max_train_samples", "100", "--audit", folder, "--output_dir", tmp_path / "clean"])
    assert none["leak_free"]["left_out"] == 0 and none["leak_free"]["val_top1"] == none["val_top1"]
    counts = np.bincount(labels, minlength=10)[1:]
    right = sum(free[f"val_class_acc/{c}"] * counts[c - 1] for c in range(1, 10))
    assert free["val_top1"] == pytest.approx(right / counts.sum())


def test_several_labels_a_sample_16_bit_files_and_videos_are_audited_on_their_own_terms(videos, tmp_path):
    """CSV files of label sets: a copy under the same set is a copy, under another a conflict. 16-bit PNGs: judged
    on their 16 bits (a mid grey is neither dark nor bright; a faint one is dark). Videos (the clip validation
    reads): a file copied across the splits is an exact copy."""
    import shutil

    from PIL import Image

    from utils.data.sources.digits import load_digits_dataset

    rows = load_digits_dataset()["train"].select(range(18))
    lines = {"train": ["path,labels"], "val": ["path,labels"]}
    for i, row in enumerate(rows):
        split = "train" if i < 12 else "val"
        row["image"].save(tmp_path / f"{i}.png")
        lines[split].append(f"{i}.png,{row['label']}|{(row['label'] + 3) % 10}")
    rows[0]["image"].save(tmp_path / "same.png")  # the same pixels and label set in validation
    rows[1]["image"].save(tmp_path / "other.png")  # and the same pixels under another set
    lines["val"] += [f"same.png,{lines['train'][1].split(',')[1]}", "other.png,0|1|2"]
    for split in lines:
        (tmp_path / f"{split}.csv").write_text("\n".join(lines[split]) + "\n")
    audit_main(["--output", tmp_path / "multi", *BATCH, "--", "--train_csv", tmp_path / "train.csv", "--val_csv",
                tmp_path / "val.csv", "--image_size", "32"])
    kinds = {(r["sample"].rsplit("/", 1)[-1], r["other_sample"].rsplit("/", 1)[-1]): (r["kind"], r["other_label"])
             for r in read_csv(tmp_path / "multi" / "findings.csv")}
    first = sorted(lines["train"][1].split(",")[1].split("|"))
    assert kinds[("0.png", "same.png")] == ("exact_copy", "|".join(first))
    assert kinds[("1.png", "other.png")] == ("conflict", "0|1|2")
    deep = tmp_path / "deep"
    rng = np.random.default_rng(1)
    for split, count in (("train", 6), ("val", 3)):
        for c in ("a", "b"):
            (deep / split / c).mkdir(parents=True)
            for i in range(count):
                array = (rng.random((16, 16)) * 20000 + 20000).astype(np.uint16)
                Image.fromarray(array).save(deep / split / c / f"{i}.png")
    Image.fromarray(np.full((16, 16), 30000, np.uint16) + rng.integers(0, 12000, (16, 16)).astype(np.uint16)).save(
        deep / "train" / "a" / "mid.png")
    faint = np.where(rng.random((16, 16)) < 0.1, 15000, 0).astype(np.uint16)  # a few lit pixels: 8 bits would
    Image.fromarray(faint).save(deep / "train" / "b" / "faint.png")  # call it bright, 16 see it dark
    audit_main(["--output", tmp_path / "deep_audit", *BATCH, "--", "--train_dir", deep / "train", "--val_dir",
                deep / "val", "--image_size", "16"])
    rows = read_csv(tmp_path / "deep_audit" / "findings.csv")
    alone = {r["sample"]: r["kind"] for r in rows if not r["other_sample"]}
    assert alone.get(str(deep / "train" / "b" / "faint.png")) == "dark"
    assert str(deep / "train" / "a" / "mid.png") not in alone
    clips = tmp_path / "clips"
    shutil.copytree(videos, clips)
    make_video(clips / "va" / "left" / "unique.mp4", frames=15, label=1)
    shutil.copy(clips / "va" / "left" / "unique.mp4", clips / "tr" / "left" / "copied.mp4")
    summary = audit_main(["--output", tmp_path / "clip_audit", "--batch_size", "4", "--num_workers", "0", "--",
                          "--train_dir", clips / "tr", "--val_dir", clips / "va", "--clip_len", "4"])
    rows = read_csv(tmp_path / "clip_audit" / "findings.csv")
    assert summary["unit"] == "clips" and summary["samples"] == {"train": 9, "val": 6}
    exact = {frozenset(Path(p).relative_to(clips).as_posix() for p in (r["sample"], r["other_sample"]))
             for r in rows if r["kind"] == "exact_copy" and r["across"] == "1"}
    # the copy, and the fixture's own: its validation videos are made as its first training videos are
    assert exact == {frozenset(("tr/left/copied.mp4", "va/left/unique.mp4"))} | {
        frozenset((f"tr/{c}/{i}.mp4", f"va/{c}/{i}.mp4")) for c, n in (("left", 3), ("right", 2)) for i in range(n)}
    # a video moving the other way is not a copy of one whose middle frame it shares
    assert not [r for r in rows if r["kind"] == "conflict"]


def test_bad_input_is_one_line_and_what_was_written_stays(injected, audited, trained, tmp_path, capsys):
    root, data, _, _ = injected
    kept = {p: p.read_bytes() for p in audited.rglob("*") if p.is_file()}
    # the features of a model in a cache of pixels only (another audit's): refused, the cache left as it was
    code, err = audit_fails([trained, "--output", audited, "--overwrite", *BATCH, "--", *data], capsys)
    assert code == 2 and len(err) == 1 and "holds what another audit computed" in err[0], err
    # the same model and data, other weights (a longer run) in the cache of the first: refused too
    audit_main([trained, "--output", tmp_path / "features", *BATCH])
    other = tmp_path / "other_run"
    run_main([*data, "--model", SMALL_MODEL, "--epochs", "2", "--num_workers", "0", "--no_plots", "--output_dir",
              other])
    cached = {p: p.read_bytes() for p in (tmp_path / "features" / "cache").rglob("*") if p.is_file()}
    code, err = audit_fails([other, "--output", tmp_path / "features", "--overwrite", *BATCH], capsys)
    assert code == 2 and len(err) == 1 and "holds what another audit computed" in err[0], err
    assert {p: p.read_bytes() for p in (tmp_path / "features" / "cache").rglob("*") if p.is_file()} == cached
    code, err = audit_fails(["--output", audited, *BATCH, "--", *data], capsys)
    assert code == 2 and err == [f"audit.py: error: {audited / 'findings.csv'} exists; pass --overwrite to replace "
                                 f"the audit's findings"]
    assert {p: p.read_bytes() for p in audited.rglob("*") if p.is_file()} == kept
    code, err = audit_fails(["--output", tmp_path / "a", "--", *data, "--exclude", audited / "exclude.csv"], capsys)
    assert code == 2 and err == ["audit.py: error: --exclude: the audit reads the splits as they are; the run that "
                                 "trains applies it (drop it after --)"]
    code, err = audit_fails(["--output", tmp_path / "a", "--", *data, "--flip_labels", "0.1"], capsys)
    assert code == 2 and err == ["audit.py: error: --flip_labels: the audit reads the splits as they are; the run "
                                 "that trains applies it (drop it after --)"]
    code, err = audit_fails(["--output", tmp_path / "b", "--", "--train_dir", root / "train", "--val_dir",
                             root / "missing"], capsys)
    assert code == 2 and len(err) == 1 and "missing" in err[0], err
    code, err = audit_fails(["--output", tmp_path / "c", "--groups", root / "groups.csv", "--", "--dataset",
                             "digits"], capsys)
    assert code == 2 and len(err) == 1 and "no paths of their own" in err[0], err
    code, err = audit_fails([], capsys)
    assert code == 2 and "give a run folder, or the data's options after --" in err[-1]
    assert not any((tmp_path / name).exists() for name in "abc")
    code, err = parse_fails_audit(["--audit", tmp_path, "--dataset", "digits"], capsys)
    assert code == 2 and err[-1].endswith(f"audit: no leaked.csv in it (give a folder audit.py wrote), got "
                                          f"'{tmp_path}'")


def parse_fails_audit(argv, capsys):
    from conftest import parse_fails

    return parse_fails(argv, capsys)


def test_the_summary_counts_parse_as_json_and_the_csv_as_csv(audited):
    """findings.csv reads back with the csv module, every row with all its columns; summary.json is JSON."""
    rows = read_csv(audited / "findings.csv")
    assert rows and all(len(r) == 11 and None not in r.values() for r in rows)
    assert json.loads((audited / "summary.json").read_text())["findings"] == len(rows)


def test_leak_free_figures_leave_out_samples_by_their_place_in_the_split_where_a_skipped_file_left_a_gap():
    """Rows kept by validation skip an undecodable file: the samples left out are named by their place in the split
    (positions), not by their row among those kept."""
    import torch

    from utils.evaluation.metrics import load_metrics
    from utils.evaluation.scoring import without
    from utils.evaluation.tasks import task_for

    task = task_for(False, 3, metrics=load_metrics(()))
    logits = torch.tensor([[5.0, 0, 0], [0, 5.0, 0], [0, 0, 5.0]])
    fields = task.fields(logits, torch.tensor([0, 0, 2]))  # the second kept row is wrong
    positions = torch.tensor([0, 2, 3])  # place 1 was a file that could not be decoded
    figures = without(task, fields, positions, frozenset({2}), ["a", "b", "c"])
    assert figures["left_out"] == 1 and figures["val_samples"] == 2 and figures["val_top1"] == 1.0


def test_the_look_is_of_the_decoded_file_not_of_what_the_eval_transform_makes_of_it(injected):
    """A sample's look (its digest, thumbnail, statistics) is that of the file as decoded, at its own size: a 48 px
    copy is looked at at 48 px, whatever the transform's 32."""
    from utils.audit.look import Look
    from utils.audit.survey import surveyed
    from utils.config.options import parse
    from utils.data.decoding.images import decode_rgb
    from utils.data.sources.folds import split_names

    root, data, pairs, _ = injected
    settings = parse([str(a) for a in data])
    train, val, _, _ = settings.source.datasets(settings.data, settings.input)
    resized = pairs["near_copy"][0][1]  # near_resized.png, 48 x 48
    at = split_names(train).index(resized)
    item = surveyed(train, val, None)[at]
    assert item["pixel_values"].shape[-1] == 32
    own = Look()(decode_rgb({"bytes": None, "path": resized}))
    for key in ("digest", "phash", "thumb", "stats"):
        assert torch_equal(item["look"][key], own[key]), key


def test_a_clips_look_is_of_its_decoded_frames(videos):
    """A video's look is that of the frames of the clip validation reads (the centre clip), as decoded: not of the
    clip the eval transform makes of them."""
    from utils.audit.look import Look
    from utils.audit.survey import surveyed
    from utils.config.options import parse
    from utils.data.datasets.clips import frame_indices
    from utils.data.sources.folds import unwrapped_split

    settings = parse(["--train_dir", str(videos / "tr"), "--val_dir", str(videos / "va"), "--clip_len", "4"])
    train, val, _, _ = settings.source.datasets(settings.data, settings.input)
    clips = unwrapped_split(val)
    frames = clips.frames.read(1, lambda count: frame_indices(count, clips.clip_len, clips.interval,
                                                              [0.5] * clips.segments))
    item = surveyed(val, val, None)[1]
    assert item["pixel_values"].shape[-2:] != frames.shape[-2:]  # the transform resized them
    own = Look()(torch_tensor(frames))
    for key in ("digest", "phash", "thumb", "stats"):
        assert torch_equal(item["look"][key], own[key]), key


def torch_tensor(frames):
    import torch

    return torch.as_tensor(frames)


def torch_equal(a, b):
    import torch

    return torch.equal(a, b)


def test_hash_candidates_are_every_pair_within_the_radius_and_no_other():
    """Hashes 4, 5 and 6 bits from the first, 1 bit between the last two: at radius 4, the pairs 4 bits or less apart;
    at 5, the 5 bits too."""
    import torch

    from utils.audit.copies import hash_neighbours

    hashes = torch.tensor([0, 0b1111, 0b11111 << 10, (0b11111 << 10) | 1], dtype=torch.int64)
    assert hash_neighbours(hashes, 4) == [(0, 1), (2, 3)]
    assert hash_neighbours(hashes, 5) == [(0, 1), (0, 2), (2, 3)]
