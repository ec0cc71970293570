"""Epoch-seeded sharded sampling, observed through 2 CPU processes (forked ranks, tests/ranks.py); the repeated
augmentation sampler's layout."""

import pytest
from conftest import read_json, reset_accelerate_state
from ranks import ranks_ok

N, BATCH = 37, 4  # 37 samples: divides by neither the world size nor the batch size


def orders(tmp_path, name, seed, epochs, nproc, n=N, options=()):
    """Each rank's orders; one process in this one (a forked rank would only add its start-up)."""
    out = tmp_path / name
    argv = [str(a) for a in (out, seed, n, BATCH, *options, *epochs)]
    if nproc == 1:
        from helpers.sample_order import main

        try:
            main(argv)
        finally:
            reset_accelerate_state()
    else:
        ranks_ok(argv, nproc=nproc, target="helpers.sample_order:main", timeout=180)
    return [{int(e) if e.isdigit() else e: o for e, o in read_json(out / f"rank_{r}.json").items()}
            for r in range(nproc)]


def global_order(rank_orders, epoch):
    """Interleave the ranks' batches back into the one sequence they were cut from."""
    per_rank = [[o[epoch][i:i + BATCH] for i in range(0, len(o[epoch]), BATCH)] for o in rank_orders]
    assert len({len(batches) for batches in per_rank}) == 1, "ranks must see the same number of batches"
    return [i for batches in zip(*per_rank) for batch in batches for i in batch]


@pytest.mark.slow
def test_two_process_sharding(tmp_path):
    first = orders(tmp_path, "a", 0, [0, 1, 2], nproc=2)
    again = orders(tmp_path, "b", 0, [2, 0], nproc=2)  # epoch 2 first: nothing ran before it
    single = orders(tmp_path, "c", 0, [0, 1], nproc=1)
    other_seed = orders(tmp_path, "d", 1, [0], nproc=1)

    for epoch in (0, 1, 2):
        r0, r1 = first[0][epoch], first[1][epoch]
        assert len(r0) == len(r1) == 20  # ceil(37 / 4) = 10 batches -> 5 per rank, last ones padded
        seq = global_order(first, epoch)
        # The first N of the interleaved sequence are a permutation of all samples, so the ranks'
        # real samples are disjoint and cover the set; the rest is Accelerate's padding, which
        # repeats samples from the start of the same permutation.
        assert sorted(seq[:N]) == list(range(N))
        assert seq[N:] == seq[:len(seq) - N] and len(seq) - N == 3
        assert set(r0) & set(r1) == set(seq[N:])  # the ranks share exactly the padded repeats
    perms = [global_order(first, e)[:N] for e in (0, 1, 2)]
    assert perms[0] != perms[1] and perms[1] != perms[2] and perms[0] != perms[2]
    # Same seed, two runs: the same per-rank order; epoch 2 did not depend on epochs 0 and 1 running.
    assert again[0][2] == first[0][2] and again[1][2] == first[1][2]
    assert again[0][0] == first[0][0] and again[1][0] == first[1][0]
    # One process sees the very same permutation, unsharded (37 = 9 x 4 + 1: a lone last image would
    # break BatchNorm, so one process leaves it out of that epoch).
    assert single[0][0] == global_order(first, 0)[:N - 1] and single[0][1] == global_order(first, 1)[:N - 1]
    assert other_seed[0][0] != single[0][0]
    assert other_seed[0][0] != single[0][1]  # seed 1 epoch 0 is not seed 0 epoch 1 shifted


@pytest.mark.slow
def test_repeated_augmentation_on_two_processes(tmp_path):
    n, reps = 30, 2  # 30 samples, batches of 4: each rank's 15 fill 4 batches (the last from its own start)
    ranks = orders(tmp_path, "ra", 0, [0, 1], nproc=2, n=n, options=["ra=2", "skip=1"])
    plain = orders(tmp_path, "plain", 0, [0], nproc=2, n=n)
    for epoch in (0, 1):
        r0, r1 = ranks[0][epoch], ranks[1][epoch]
        assert len(r0) == len(r1) == len(plain[0][0]) == 16  # the epoch keeps its length
        real = [keys[:15] for keys in (r0, r1)]  # each rank's share; the 16th repeats its first
        assert r0[15] == r0[0] and r1[15] == r1[0]
        samples = [k % n for share in real for k in share]
        # 15 samples drawn, each exactly twice per epoch, as copies 0 and 1 (their own augmentation)...
        assert len(set(samples)) == 15 and all(samples.count(i) == reps for i in set(samples))
        assert sorted(k // n for share in real for k in share) == [0] * 15 + [1] * 15
        # ... and a sample's two copies always on different processes.
        assert {k % n for k in real[0]} == {k % n for k in real[1]}
        assert not set(real[0]) & set(real[1])
        # A run resumed after one batch sees the rest of the same order.
        assert ranks[0][f"{epoch}:resumed"] == r0[4:] and ranks[1][f"{epoch}:resumed"] == r1[4:]
    assert sorted(ranks[0][0]) != sorted(ranks[0][1])  # another draw each epoch


def test_repeated_augmentation_keys_stay_distinct_when_the_copies_cycle():
    """5 samples, 2 copies each, 4 processes: ceil(5 / 2) = 3 samples drawn give 6 items for the 8 places of the
    epoch, so the list cycles and the first sample drawn comes twice more. Those are copies 2 and 3, keys of
    their own (their own augmentation), not copies 0 and 1 again."""
    from utils.data.loading.sampling import EpochSampler

    sampler = EpochSampler(num_samples=5, num_processes=4, batch_size=2, seed=0, reps=2)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        keys = list(sampler)  # 1 step x 4 ranks x batch 2: no padding, every key a real item
        assert len(keys) == len(sampler) == 8 and len(set(keys)) == 8, keys
        samples = [k % 5 for k in keys]
        counts = sorted(samples.count(s) for s in set(samples))
        assert counts == [2, 2, 4]  # the first sample drawn: 4 times, as copies 0, 1, 2, 3
        cycled = max(set(samples), key=samples.count)
        assert sorted(k // 5 for k in keys if k % 5 == cycled) == [0, 1, 2, 3]


@pytest.mark.slow
def test_a_balanced_epoch_is_one_draw_for_any_world_size_and_resumes_where_it_stood(tmp_path):
    """--sampler balanced on 37 samples of 3 classes (24, 10, 3): 2 processes deal out the very sequence that 1
    process trains on, as a shuffle's is; each epoch is another draw; a run resumed after one batch sees the rest."""
    from helpers.sample_order import long_tail

    two = orders(tmp_path, "two", 0, [0, 1], nproc=2, options=["balanced=1", "skip=1"])
    one = orders(tmp_path, "one", 0, [0, 1], nproc=1, options=["balanced=1"])
    classes = long_tail(N)
    for epoch in (0, 1):
        seq = global_order(two, epoch)
        assert len(seq) == 40 and seq[N:] == seq[:3]  # 37 draws; Accelerate pads the last batch from the start
        assert one[0][epoch] == seq[:N - 1]  # one process: the same draws in the same order (a lone last one waits)
        assert len(set(seq[:N])) == N  # a sample drawn again is another key: another copy, its own augmentation
        drawn = [classes[k % N] for k in seq[:N]]
        assert all(drawn.count(c) >= 6 for c in (0, 1, 2)), drawn  # 3 samples of class 2 come up about 12 times
        for rank in (0, 1):
            assert two[rank][f"{epoch}:resumed"] == two[rank][epoch][BATCH:]
    assert global_order(two, 0) != global_order(two, 1)


def test_balanced_draws_give_each_class_its_share_and_keep_copies_apart():
    """5 classes of 700, 200, 80, 15 and 5 samples: power 1 draws each about a fifth of an epoch, power 0.5 in
    proportion to the square root of its count; with repeated augmentation too, every key is distinct."""
    import numpy as np

    from utils.data.loading.sampling import EpochSampler
    from utils.evaluation.tasks import task_for
    from utils.training.balance import sample_weights

    counts, task = np.array([700, 200, 80, 15, 5]), task_for(False, 5)
    labels = np.repeat(np.arange(5), counts)
    for power, expected in ((1, np.full(5, 0.2)), (0.5, np.sqrt(counts) / np.sqrt(counts).sum())):
        sampler = EpochSampler(1000, 1, 50, seed=3, weights=sample_weights(task, labels.tolist(), counts, power),
                               draws=40_000)
        keys = np.array(list(sampler))
        assert len(keys) == len(sampler) == 40_000 and len(set(keys.tolist())) == len(keys)
        share = np.bincount(labels[keys % 1000], minlength=5) / len(keys)
        assert share == pytest.approx(expected, abs=0.01), (power, share)
    repeated = EpochSampler(1000, 2, 50, seed=3, reps=2, weights=sample_weights(task, labels.tolist(), counts, 1))
    keys = list(repeated)
    assert len(keys) == len(repeated) == 1000 and len(set(keys)) == 1000  # 500 draws x 2 copies: no padding needed
    by_rank = [keys[r * 50:(r + 1) * 50] for r in (0, 1)]  # the first step: rank 0's batch, then rank 1's
    assert {k % 1000 for k in by_rank[0]} == {k % 1000 for k in by_rank[1]}  # each sample's copies on both ranks
