"""--streaming: local parquet and webdataset shards read as a stream, each process its own shards, every
sample of an epoch once, and a resumed run continuing where its checkpoint stood (utils/data/streaming/)."""

import io
import tarfile

import numpy as np
import pytest
import torch
from conftest import TINY, assert_same_weights, read_json, resumed_from
from PIL import Image
from ranks import ranks_killed, ranks_ok

TRAIN_SHARDS, ROWS_PER_SHARD, VAL_ROWS = 4, 24, 16


def _picture(rng, label):
    pixels = rng.integers(0, 60, (20, 20, 3)) + np.array([[[60 * label, 200 - 40 * label, 30 + 50 * label]]])
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


@pytest.fixture(scope="session")
def parquet_shards(tmp_path_factory):
    """train-0000k-of-00004.parquet (24 rows each) and one validation file: 4 classes, and an `id` column
    (0..95 in train, 1000.. in validation) that the order tests read as their label."""
    import datasets

    root = tmp_path_factory.mktemp("parquet")
    rng = np.random.default_rng(0)
    features = datasets.Features(image=datasets.Image(), label=datasets.ClassLabel(names=list("abcd")),
                                 id=datasets.Value("int64"))

    def part(ids):
        labels = [i % 4 for i in ids]
        return datasets.Dataset.from_dict({"image": [_picture(rng, c) for c in labels], "label": labels,
                                           "id": list(ids)}, features=features)

    for s in range(TRAIN_SHARDS):
        part(range(s * ROWS_PER_SHARD, (s + 1) * ROWS_PER_SHARD)).to_parquet(
            root / f"train-{s:05d}-of-{TRAIN_SHARDS:05d}.parquet")
    part(range(1000, 1000 + VAL_ROWS)).to_parquet(root / "validation-00000-of-00001.parquet")
    return root


def stream_args(source, *extra):
    from utils.config.options import parse_args

    return parse_args(["--dataset", str(source), "--streaming", "--image_size", "16", "--batch_size", "4",
                       "--num_workers", "2", *map(str, extra)])


def loader_for(args, rank, world):
    """This rank's StreamLoader, as the script builds it (CPU)."""

    from utils.core.preemption import worker_init_fn
    from utils.config.settings import input_for
    from utils.data.streaming.loader import StreamLoader
    from utils.data.sources.streamed import build_stream

    rows, _, _, _ = build_stream(args, rank, world, input_for(args))
    return StreamLoader(rows, args.batch_size, args.num_workers, rows.micro_batches, torch.device("cpu"),
                        worker_init_fn())


def ids_of(batches):
    return [b["labels"].tolist() for b in batches]


def stop_after(loader, epoch, batches, folder):
    """The first `batches` of `epoch` from `loader`, its position then saved into `folder` as a checkpoint does."""
    head = []
    for batch in loader.batches(epoch):
        head.append(batch)
        if len(head) == batches:
            break
    loader.save_position(folder, rank=0)
    return head


def loader_resumed(args, folder):
    """A new loader (rank 0 of 2) at the position saved in `folder`."""
    loader = loader_for(args, 0, 2)
    loader.load_position(folder, rank=0)
    return loader


def test_each_process_reads_its_own_shards_and_every_sample_once_per_epoch(parquet_shards):
    """2 processes x 2 workers: each process's samples come from 2 whole shards of its own; together they take
    every sample once per epoch; the order changes with the epoch."""
    args = stream_args(parquet_shards, "--label_column", "id")
    for epoch in (0, 1):
        seen = {rank: sum(ids_of(loader_for(args, rank, 2).batches(epoch)), []) for rank in (0, 1)}
        assert sorted(seen[0] + seen[1]) == list(range(TRAIN_SHARDS * ROWS_PER_SHARD))
        shards = [{i // ROWS_PER_SHARD for i in seen[rank]} for rank in (0, 1)]
        assert len(shards[0]) == len(shards[1]) == 2 and not shards[0] & shards[1]
        if epoch == 0:
            first = seen[0]
    assert seen[0] != first  # epoch 1 is another order


def test_the_shard_order_and_the_block_order_each_change_with_the_epoch(parquet_shards, monkeypatch):
    """Two shuffles, each seeded by the epoch on its own: the order of the shards in an epoch's pass, and the
    order within a block of samples read in a row (one process, no workers: nothing else moves them)."""

    from utils.config.settings import input_for
    from utils.data.sources.streamed import build_stream

    args = stream_args(parquet_shards, "--label_column", "id", "--num_workers", "0")
    rows, _, _, _ = build_stream(args, 0, 1, input_for(args))

    def shard_order(epoch):
        ids = [row["label"] for row in rows.share(epoch)]
        assert sorted(ids) == list(range(TRAIN_SHARDS * ROWS_PER_SHARD))
        return [i // ROWS_PER_SHARD for i in ids[::ROWS_PER_SHARD]]  # one shard at a time

    orders = [shard_order(epoch) for epoch in range(4)]
    assert all(sorted(order) == list(range(TRAIN_SHARDS)) for order in orders)
    assert len({tuple(order) for order in orders}) > 1, orders
    # The same pass of shards every epoch: the block shuffle alone must still give another order.
    first_pass = rows.share(0)
    monkeypatch.setattr(rows, "share", lambda epoch: first_pass)
    samples = []
    for epoch in (0, 1):
        rows.set_epoch(epoch)
        samples.append([item["labels"] for item in rows])
    assert sorted(samples[0]) == sorted(samples[1]) == list(range(TRAIN_SHARDS * ROWS_PER_SHARD))
    assert samples[0] != samples[1]


def test_a_resumed_stream_continues_where_its_checkpoint_stood(parquet_shards, tmp_path):
    """5 batches into epoch 1, the position saved as a checkpoint does; a new loader continues from it with
    the same samples, augmented alike, and then starts epoch 2 from its beginning."""
    args = stream_args(parquet_shards, "--label_column", "id")
    whole = loader_for(args, 0, 2)
    epoch1, epoch2 = list(whole.batches(1)), list(whole.batches(2))
    head = stop_after(loader_for(args, 0, 2), 1, 5, tmp_path)
    again = loader_resumed(args, tmp_path)
    batches = head + list(again.batches(1, skipped=5))
    assert ids_of(batches) == ids_of(epoch1)
    assert all(torch.equal(a["pixel_values"], b["pixel_values"]) for a, b in zip(batches, epoch1))
    assert ids_of(again.batches(2)) == ids_of(epoch2)
    with pytest.raises(Exception, match="resume with --num_workers 2"):
        loader_for(stream_args(parquet_shards, "--label_column", "id", "--num_workers", "1"), 0, 2).load_position(
            tmp_path, rank=0)


def _shuffled_pass(rows, epoch):
    """A process's pass as `datasets`' shuffle() ordered it (a buffer of one): how StreamRows read before."""
    from datasets.distributed import split_dataset_by_node

    from utils.core.seeding import spread

    order = rows.stream.shuffle(seed=spread(rows.seed, epoch), buffer_size=1, max_buffer_input_shards=1)
    return split_dataset_by_node(order, rank=rows.rank, world_size=rows.world)


def test_the_shard_order_is_the_one_datasets_shuffle_gives(parquet_shards):
    """The pass is `datasets`' set_epoch shard order, our seed as its epoch (0, --seed 0's first epoch, through
    shuffle()): the samples, in order, of the shuffle(seed) the earlier reader used, on each of 2 processes
    (whole shards each) and on one of 3 (every shard, one sample in 3)."""
    from utils.config.settings import input_for
    from utils.data.sources.streamed import build_stream

    for seed, epoch in ((0, 0), (0, 1), (5, 2)):
        args = stream_args(parquet_shards, "--label_column", "id", "--num_workers", "0", "--seed", seed)
        for world, rank in ((2, 0), (2, 1), (3, 2)):
            rows, _, _, _ = build_stream(args, rank, world, input_for(args))
            ids = [row["label"] for row in rows.share(epoch)]
            assert len(ids) == TRAIN_SHARDS * ROWS_PER_SHARD // world
            assert ids == [row["label"] for row in _shuffled_pass(rows, epoch)], (seed, epoch, world, rank)


def test_a_position_written_by_the_shuffle_reader_resumes_exactly(parquet_shards, tmp_path):
    """A checkpoint of the earlier reader (shuffle(), whose stream state `datasets` would not load into a
    set_epoch pass, and would silently start the epoch again) resumes at the same sample: 5 batches into
    epoch 1, blocks of 5 (the position is mid-block, in the 2nd block of a worker), the rest of the epoch
    and the next as an uninterrupted loader gives them, ids and pixels."""
    args = stream_args(parquet_shards, "--label_column", "id", "--shuffle_buffer", "5")
    whole = loader_for(args, 0, 2)
    epoch1, epoch2 = list(whole.batches(1)), list(whole.batches(2))
    earlier = loader_for(args, 0, 2)
    earlier.dataset.share = lambda epoch: _shuffled_pass(earlier.dataset, epoch)  # (forked: the workers have it)
    stop_after(earlier, 1, 5, tmp_path)
    again = loader_resumed(args, tmp_path)
    rest = list(again.batches(1, skipped=5))
    assert ids_of(rest) == ids_of(epoch1)[5:]
    assert all(torch.equal(a["pixel_values"], b["pixel_values"]) for a, b in zip(rest, epoch1[5:]))
    assert ids_of(again.batches(2)) == ids_of(epoch2)


@pytest.mark.slow
def test_blocks_read_ahead_give_each_epoch_what_a_fresh_loader_reads(parquet_shards, tmp_path):
    """A block is read in a thread while the one before is used, and a kept worker reads the next epoch's first
    block once its pass runs out. Blocks of 5 (several per worker and epoch): a loader whose workers are kept
    over epochs 0, 1 and then 3 (2 skipped: its read-ahead is of the wrong epoch) hands out, epoch by epoch, the
    ids and pixels of a new loader reading that epoch alone; and resumed 3 batches into epoch 1 (mid-block), the
    rest of that epoch and all of the next."""
    args = stream_args(parquet_shards, "--label_column", "id", "--shuffle_buffer", "5")
    kept = loader_for(args, 0, 2)
    for epoch in (0, 1, 3):
        batches, alone = list(kept.batches(epoch)), list(loader_for(args, 0, 2).batches(epoch))
        assert ids_of(batches) == ids_of(alone) and len(ids_of(batches)) == 12, epoch
        assert all(torch.equal(a["pixel_values"], b["pixel_values"]) for a, b in zip(batches, alone))
        if epoch == 1:
            epoch1 = ids_of(batches)
    stop_after(loader_for(args, 0, 2), 1, 3, tmp_path)
    again = loader_resumed(args, tmp_path)
    assert ids_of(again.batches(1, skipped=3)) == epoch1[3:]
    assert ids_of(again.batches(2)) == ids_of(loader_for(args, 0, 2).batches(2))


def _counting_decodes(monkeypatch, workers, slow=(), seconds=0.02):
    """Samples each DataLoader worker decodes (shared memory: the workers are forked after this); the workers
    in `slow` take `seconds` longer a sample."""
    import time

    from torch.utils.data import get_worker_info

    from utils.data.streaming import rows as streaming

    counts, load_item = torch.zeros(workers, dtype=torch.int64).share_memory_(), streaming.load_item

    def counted(*args, **kwargs):
        worker = get_worker_info().id
        counts[worker] += 1
        if worker in slow:
            time.sleep(seconds)
        return load_item(*args, **kwargs)

    monkeypatch.setattr(streaming, "load_item", counted)
    return counts


def test_workers_make_only_the_batches_an_epoch_takes(parquet_shards, monkeypatch):
    """An epoch shorter than the stream (--steps_per_epoch 9 of 24; 2 workers of 48 rows, blocks of 5): each
    worker decodes the samples of its turns (batches 0, 2, .. 8 and 1, 3, .. 7) and nothing past them (the
    loader asks 2 batches ahead a worker), and hands out what it would reading its whole pass, epoch by epoch,
    the next epoch's first block read ahead."""
    from utils.data.streaming.loader import Turns

    args = stream_args(parquet_shards, "--label_column", "id", "--steps_per_epoch", "9", "--shuffle_buffer", "5")
    whole = loader_for(args, 0, 1)
    whole.dataset.turns = Turns()  # no turns: every worker reads its whole pass
    reference = [list(whole.batches(epoch)) for epoch in (0, 1, 2)]
    del whole  # its workers gone before the count starts
    counts, dealt = _counting_decodes(monkeypatch, 2), loader_for(args, 0, 1)
    for epoch in (0, 1, 2):
        batches = list(dealt.batches(epoch))
        assert counts.tolist() == [20, 16], epoch
        counts.zero_()
        assert ids_of(batches) == ids_of(reference[epoch]) and len(batches) == 9
        assert all(torch.equal(a["pixel_values"], b["pixel_values"]) for a, b in zip(batches, reference[epoch]))


@pytest.mark.slow
def test_a_worker_that_runs_out_first_leaves_its_turns_to_the_others(parquet_shards, monkeypatch):
    """3 workers on 4 shards: one reads 2 (48 rows), two read 1 (24 rows, 6 batches of their 8 turns). The one
    with more goes on past its turns, and the epoch takes what it takes without turns: every sample once, in the
    same order."""
    from utils.data.streaming.loader import Turns

    args = stream_args(parquet_shards, "--label_column", "id", "--num_workers", "3")
    whole = loader_for(args, 0, 1)
    whole.dataset.turns = Turns()
    reference = [ids_of(whole.batches(epoch)) for epoch in (0, 1)]
    del whole
    # The two short ones slow, and slower still to find their pass's end (a stream's last read can be): the long
    # one is asked past its 8 turns before they know they are short, and must wait to hear it.
    import time

    from torch.utils.data import get_worker_info

    from utils.data.streaming import blocks as stream_blocks

    read = stream_blocks.BlockReader._read

    def read_late(reader):
        start, rows, more = read(reader)
        if not rows and get_worker_info().id in (1, 2):
            time.sleep(1)
        return start, rows, more

    monkeypatch.setattr(stream_blocks.BlockReader, "_read", read_late)
    counts = _counting_decodes(monkeypatch, 3, slow=(1, 2))
    dealt = loader_for(args, 0, 1)
    batches = ids_of(dealt.batches(0))
    assert counts.tolist() == [48, 24, 24]
    assert batches == reference[0] and sorted(sum(batches, [])) == list(range(96))
    earlier = dealt.batches(1)
    next(earlier)  # an epoch left after a batch, its generator closed only once the next has begun
    batches = dealt.batches(1)
    head = next(batches)
    del earlier  # must not end the round under way
    assert ids_of([head, *batches]) == reference[1]


def test_more_workers_than_batches_and_an_epoch_left_early(parquet_shards, monkeypatch):
    """One batch an epoch and 2 workers: the second has no turns and decodes nothing. 3 workers, an epoch left
    after 5 of its 9 batches (a run's last step, a preemption) while the slow third still owes a turn that the
    shutdown makes it skip: the first, asked past its turns and waiting on the third's, is let go, and the
    workers stop at once (not after the 5 s the loader gives a stuck worker)."""
    import time

    counts = _counting_decodes(monkeypatch, 3, slow=(2,), seconds=0.1)
    one = loader_for(stream_args(parquet_shards, "--label_column", "id", "--steps_per_epoch", "1"), 0, 1)
    assert len(list(one.batches(0))) == 1 and counts.tolist()[1] == 0
    del one
    args = stream_args(parquet_shards, "--label_column", "id", "--steps_per_epoch", "9", "--num_workers", "3")
    left = loader_for(args, 0, 1)
    for taken, _ in enumerate(left.batches(0), 1):
        if taken == 5:
            break
    time.sleep(0.2)  # worker 0 has made its 3 turns and is asked for a batch past them
    start = time.perf_counter()
    del left, _
    assert time.perf_counter() - start < 4


@pytest.mark.slow
def test_a_pass_left_open_at_exit_ends_quietly(parquet_shards):
    """Without workers, an epoch that ends before its pass leaves the pass open (nothing asks for the sample that
    would close it) until the interpreter exits: it must end without a traceback then (the reading thread's pool
    and pyarrow are half gone by the time such a generator is collected)."""
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parent
    code = (f"import sys; sys.path[:0] = [{str(tests)!r}, {str(tests.parent)!r}]\n"
            "from test_streaming import loader_for, stream_args\n"
            f"args = stream_args({str(parquet_shards)!r}, '--num_workers', '0', '--steps_per_epoch', '2')\n"
            "loader = loader_for(args, 0, 1)\n"  # kept to the end, as the script keeps its loader
            "print(len(list(loader.batches(0))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split() == ["2"], done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_an_epoch_has_its_length_on_every_process_padded_when_shards_run_out(parquet_shards):
    """--steps_per_epoch past the data: the missing batches are padding, which trains on nothing."""
    from utils.data.loading.bad_files import BadImages
    from utils.data.streaming.loader import PADDING

    args = stream_args(parquet_shards, "--steps_per_epoch", "14")
    loader = loader_for(args, 1, 2)
    batches = list(loader.batches(0))
    assert len(batches) == 14
    assert [b["error"] == [PADDING] for b in batches] == [False] * 12 + [True] * 2
    assert [BadImages(skip=False).check(b) for b in batches] == [4] * 12 + [0] * 2
    # the next epoch is a new pass: its shards are read again, not taken as run out
    assert [b["error"] == [PADDING] for b in loader.batches(1)] == [False] * 12 + [True] * 2


def test_an_epoch_of_accumulated_steps_takes_all_its_micro_batches(parquet_shards):
    """--grad_accum_steps 2: the epoch is the split over the global batch (2 processes x 4 x 2 = 16), 6 optimizer
    steps of 2 micro-batches: 12 batches on each process, every sample once, as without accumulation."""
    args = stream_args(parquet_shards, "--grad_accum_steps", 2, "--label_column", "id")
    loaders = [loader_for(args, rank, 2) for rank in (0, 1)]
    assert [len(loader) for loader in loaders] == [12, 12]
    seen = sum((sum(ids_of(loader.batches(0)), []) for loader in loaders), [])
    assert sorted(seen) == list(range(TRAIN_SHARDS * ROWS_PER_SHARD))


@pytest.fixture(scope="session")
def webdataset_shards(tmp_path_factory):
    """train-00000k.tar of {key}.jpg / {key}.cls (timm's and OpenCLIP's layout), and validation-000000.tar."""
    root = tmp_path_factory.mktemp("wds")
    rng = np.random.default_rng(1)

    def shard(path, keys):
        with tarfile.open(path, "w") as tar:
            for key in keys:
                jpeg = io.BytesIO()
                _picture(rng, key % 3).save(jpeg, "JPEG")
                for name, data in ((f"{key:06d}.jpg", jpeg.getvalue()), (f"{key:06d}.cls", str(key % 3).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))

    shard(root / "train-000000.tar", range(0, 30))
    shard(root / "train-000001.tar", range(30, 60))
    shard(root / "validation-000000.tar", range(100, 112))
    return root


@pytest.mark.slow
def test_webdataset_tar_shards_train(webdataset_shards, tmp_path, fresh_accelerate_state):
    import train_classification

    results = train_classification.main(["--dataset", str(webdataset_shards), "--streaming", "--image_size", "16",
                                         "--batch_size", "8", "--epochs", "3", "--num_workers", "2", "--lr", "0.05",
                                         "--output_dir", str(tmp_path / "run")])
    assert results["train_samples"] == 60 and results["val_samples"] == 12
    assert results["class_names"] == ["0", "1", "2"] and results["global_step"] == 3 * (60 // 8)
    assert results["val_top1"] >= 0.9


def test_what_streaming_cannot_read_is_refused_in_one_line(parquet_shards, tmp_path, capsys):
    import shutil

    import train_classification

    no_val = tmp_path / "no_val"
    no_val.mkdir()
    shutil.copy(next(parquet_shards.glob("train-*")), no_val)
    cases = [(["--dataset", str(no_val), "--streaming"], "val_split: --streaming needs a validation split"),
             ([*TINY, "--streaming"], "streaming: reads a Hub dataset or local shard files"),
             (["--dataset", str(parquet_shards), "--streaming", "--ra_reps", "2"], "ra_reps: repeated augmentation"),
             (["--dataset", str(parquet_shards), "--steps_per_epoch", "3"], "steps_per_epoch: sets the epoch of"),
             (["--dataset", str(parquet_shards), "--streaming", "--sync_bn"], "sync_bn: not with --streaming"),
             (["--dataset", str(tmp_path / "empty"), "--streaming"], "dataset: cannot stream")]
    (tmp_path / "empty").mkdir()
    for argv, line in cases:
        with pytest.raises(SystemExit) as exit_:
            train_classification.main([*argv, "--output_dir", str(tmp_path / "run")])
        assert exit_.value.code == 2
        assert line in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_streaming_run_killed_mid_epoch_on_two_processes_resumes_bitwise(parquet_shards, tmp_path):
    """SIGKILL at step 4 of 6 in epoch 0 (2 workers per process), --resume latest: the run continues from each
    worker's place in the stream, and ends bitwise-equal to the uninterrupted run, with its validation figures."""
    def job(out):
        return ["--dataset", parquet_shards, "--streaming", "--image_size", "16", "--batch_size", "8",
                "--epochs", "2", "--num_workers", "2", "--log_every", "1", "--lr", "0.05",
                "--checkpoint_every_steps", "1", "--output_dir", out]

    reference = tmp_path / "reference"
    ranks_ok(job(reference), nproc=2)
    out = tmp_path / "run"
    ranks_killed(job(out), "step:4", nproc=2)
    assert not (out / "results.json").exists()
    step = out / "checkpoints" / "step_3"
    assert sorted(p.name for p in step.glob("stream_state_*.pkl")) == ["stream_state_0.pkl", "stream_state_1.pkl"]
    resumed = ranks_ok([*job(out), "--resume", "latest"], nproc=2)
    assert resumed_from(resumed.stdout) == step
    assert_same_weights(out, reference)
    figures = ("val_top1", "val_topk", "val_loss", "val_samples", "global_step")
    assert [read_json(out / "results.json")[k] for k in figures] == \
        [read_json(reference / "results.json")[k] for k in figures]

