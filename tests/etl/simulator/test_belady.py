"""Belady's floor against brute force on small traces (equal sizes: MIN is optimal)."""

import random

from etl.simulator.belady import belady_fetches


def brute_force(requests, capacity_slots):
    """Fewest fetches over every eviction choice (demand paging, equal sizes)."""
    best = [len(requests)]

    def go(i, cache, fetches):
        if fetches >= best[0]:
            return
        if i == len(requests):
            best[0] = fetches
            return
        seg = requests[i]
        if seg in cache:
            go(i + 1, cache, fetches)
        elif len(cache) < capacity_slots:
            go(i + 1, cache | {seg}, fetches + 1)
        else:
            for victim in cache:
                go(i + 1, (cache - {victim}) | {seg}, fetches + 1)

    go(0, frozenset(), 0)
    return best[0]


def test_min_equals_brute_force_on_random_traces():
    rng = random.Random(5)
    for _ in range(60):
        requests = [rng.randrange(5) for _ in range(rng.randrange(1, 11))]
        cap = rng.randrange(1, 4)
        sizes = {s: 10 for s in range(5)}
        assert belady_fetches([[r] for r in requests], sizes, cap * 10) == brute_force(requests, cap)


def test_everything_fits_means_one_fetch_per_segment():
    batches = [[1, 2], [2, 3], [1], [3, 2, 1]]
    assert belady_fetches(batches, {1: 5, 2: 5, 3: 5}, 15) == 3


def test_a_segment_bigger_than_memory_is_fetched_every_time():
    assert belady_fetches([[1], [1], [1]], {1: 50}, 10) == 3


def test_no_memory_fetches_every_request():
    batches = [[1, 2], [1, 2]]
    assert belady_fetches(batches, {1: 1, 2: 1}, 0) == 4
