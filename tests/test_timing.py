"""workbook.timing: the harness's rotation, call counts and statistics, with a fake clock; geometric means."""
from __future__ import annotations

import math
import random
import statistics
import time

import pytest
import torch

from workbook import timing

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def rng():
    return random.Random()


class FakeGpu:
    """A function under test plus the clock that times it: set k 'takes' durations_ms[k] of fake time."""

    def __init__(self, durations_ms):
        self.durations_ms = durations_ms
        self.now = 0.0
        self.seen = []

    def clock(self) -> float:
        return self.now

    def __call__(self, set_id, payload):
        self.seen.append(set_id)
        self.now += self.durations_ms[set_id] / 1e3


def test_rotation_counts_and_statistics(rng):
    n_sets, warmup, iters = rng.randint(1, 5), rng.randint(0, 12), rng.randint(1, 40)
    durations = [rng.uniform(0.01, 5.0) for _ in range(n_sets)]
    fake = FakeGpu(durations)
    sets = [(k, object()) for k in range(n_sets)]
    t = timing.bench(fake, sets, warmup=warmup, iters=iters, clock=fake.clock)

    assert fake.seen == [i % n_sets for i in range(warmup + iters)]
    expected = [durations[i % n_sets] for i in range(warmup, warmup + iters)]
    assert len(t.samples) == iters
    assert t.samples == pytest.approx(expected)
    assert t.ms_median == pytest.approx(statistics.median(expected))
    assert (t.ms_min, t.ms_max) == (pytest.approx(min(expected)), pytest.approx(max(expected)))
    assert t.clock == timing.PERF_COUNTER


def test_defaults_are_the_seed_method():
    fake = FakeGpu([1.0, 2.0, 3.0])
    t = timing.bench(fake, [(0, None), (1, None), (2, None)], clock=fake.clock)
    assert len(fake.seen) == 10 + 30 and len(t.samples) == 30
    assert fake.seen[10] == 1    # the first timed call continues the rotation where warm-up stopped


def test_arguments_are_passed_through():
    got = []
    timing.bench(lambda *args: got.append(args), [("a", 1), ("b", 2, 3)], warmup=1, iters=2)
    assert got == [("a", 1), ("b", 2, 3), ("a", 1)]


def test_real_clock_measures_at_least_the_sleep():
    t = timing.bench(time.sleep, [(0.002,)], warmup=1, iters=3)
    assert t.ms_min >= 2.0 and "CPU, harness test only" in str(t)


def test_tflops():
    t = timing.Timing(ms_min=0.5, ms_median=2.0, ms_max=3.0, samples=(0.5, 2.0, 3.0))
    assert t.tflops(4e12) == pytest.approx(2000.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(input_sets=[]), "non-empty"),
    (dict(input_sets="abc"), "non-empty"),
    (dict(input_sets=[1, 2]), r"input_sets\[0\]"),
    (dict(input_sets=[()], warmup=-1), "warmup"),
    (dict(input_sets=[()], iters=0), "iters"),
    (dict(input_sets=[()], iters=True), "iters"),
    (dict(input_sets=[()], iters=2.0), "iters"),
])
def test_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        timing.bench(lambda *a: None, **kwargs)


def test_rejects_non_callable():
    with pytest.raises(ValueError, match="callable"):
        timing.bench(42, [()])


def test_rejects_a_clock_that_goes_backwards():
    ticks = iter([10.0, 9.0] * 5)
    with pytest.raises(ValueError, match="backwards"):
        timing.bench(lambda: None, [()], warmup=0, iters=5, clock=lambda: next(ticks))


def test_geomean(rng):
    vals = [rng.uniform(0.01, 100) for _ in range(rng.randint(1, 20))]
    assert timing.geomean(vals) == pytest.approx(math.prod(vals) ** (1 / len(vals)))
    with pytest.raises(ValueError):
        timing.geomean([])
    with pytest.raises(ValueError):
        timing.geomean([1.0, 0.0])


def test_geomean_speedup_pct(rng):
    p = rng.uniform(-50, 200)
    assert timing.geomean_speedup_pct([p] * rng.randint(1, 9)) == pytest.approx(p)
    # +100% and -50% cancel: twice as fast, then half as fast
    assert timing.geomean_speedup_pct([100.0, -50.0]) == pytest.approx(0.0, abs=1e-12)
    pcts = [rng.uniform(0, 100) for _ in range(8)]
    assert timing.geomean_speedup_pct(pcts) < statistics.mean(pcts)   # AM-GM: never above the plain mean
    with pytest.raises(ValueError):
        timing.geomean_speedup_pct([-100.0])


@pytest.mark.gpu
@requires_cuda
def test_cuda_events_on_gpu():
    sets = [(torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16, generator=None),) for _ in range(3)]
    t = timing.bench(lambda a: a @ a, sets, warmup=3, iters=7)
    assert t.clock == timing.CUDA_EVENTS and len(t.samples) == 7
    assert 0 < t.ms_min <= t.ms_median <= t.ms_max
    with pytest.raises(ValueError, match="clock"):
        timing.bench(lambda a: a, sets, clock=time.perf_counter)


def test_back_to_back_refuses_bad_counts():
    with pytest.raises(ValueError, match="calls"):
        timing.back_to_back(lambda: None, [()], calls=0)
    with pytest.raises(ValueError, match="warmup"):
        timing.back_to_back(lambda: None, [()], calls=1, warmup=-1)


@pytest.mark.gpu
@requires_cuda
def test_back_to_back_rotates_sets_and_times_every_call():
    sets = [(torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16),) for _ in range(3)]
    seen = []
    gpu_ms, host_ms = timing.back_to_back(lambda a: seen.append(a.data_ptr()) or a @ a, sets, calls=7, warmup=2)
    ptrs = [a.data_ptr() for (a,) in sets]
    assert seen == [ptrs[i % 3] for i in range(2)] + [ptrs[i % 3] for i in range(7)]
    assert gpu_ms > 0 and host_ms > 0


class DriftingGpu:
    """Every call takes 1 ms more fake time than the one before: a chip that slows down as it works."""

    def __init__(self):
        self.now = 0.0
        self.calls = 0
        self.order = []

    def clock(self) -> float:
        return self.now

    def contender(self, name):
        def call(*args):
            self.order.append(name)
            self.calls += 1
            self.now += self.calls * 1e-3
        return call


def test_interleaved_rounds_share_the_drift_between_identical_contenders():
    gpu = DriftingGpu()
    names = ["first", "second", "third"]
    got = timing.bench_interleaved({n: gpu.contender(n) for n in names}, [(0,)], rounds=3, warmup=2, iters=9,
                                   settle=0, clock=gpu.clock)
    assert all(len(t.samples) == 9 for t in got.values())
    assert gpu.calls == 3 * (2 + 9)            # the warm-up calls once, before each contender's first round
    # the order rotates: each name leads one round (round 0 holds the warm-ups: 3 x (2 + 3) calls, then 3 x 3)
    leads = [gpu.order[i] for i in (0, 15, 24)]
    assert leads == names
    spread = max(t.ms_median for t in got.values()) / min(t.ms_median for t in got.values())
    # the same three timed one after the other on a fresh chip: the last reads ~4x the first
    gpu = DriftingGpu()
    sequential = [timing.bench(gpu.contender(n), [(0,)], warmup=2, iters=9, clock=gpu.clock).ms_median for n in names]
    assert sequential == sorted(sequential) and sequential[-1] / sequential[0] > 3
    assert spread < sequential[-1] / sequential[0] / 2, (spread, sequential)


def test_interleaved_by_default_takes_turns_call_by_call_and_never_repeats_an_input_set():
    seen = []
    fns = {n: (lambda x, n=n: seen.append((n, x))) for n in ("a", "b")}
    got = timing.bench_interleaved(fns, [(0,), (1,), (2,)], warmup=1, iters=4, clock=iter(range(10**6)).__next__)
    assert all(len(t.samples) == 4 for t in got.values())
    # a's warm-up and first call, b's warm-up and first call, then turns of one settling and one timed call
    # each, the leader alternating: a timed call always follows a call of its own contender
    assert [n for n, _ in seen] == ["a", "a", "b", "b"] + ["b", "b", "a", "a"] + ["a", "a", "b", "b"] + ["b", "b", "a", "a"]
    sets = [x for _, x in seen]
    assert sets == [i % 3 for i in range(len(seen))]      # the rotation runs over all calls together
    assert all(x != y for x, y in zip(sets, sets[1:]))


def test_bench_offset_starts_the_input_set_rotation():
    seen = []
    timing.bench(lambda x: seen.append(x), [(0,), (1,), (2,)], warmup=1, iters=3, offset=2,
                 clock=iter(range(100)).__next__)
    assert seen == [2, 0, 1, 2]
    with pytest.raises(ValueError, match="offset"):
        timing.bench(lambda x: None, [(0,)], offset=-1, clock=iter(range(100)).__next__)


def test_interleaved_needs_at_least_one_call_per_round():
    with pytest.raises(ValueError, match="iters"):
        timing.bench_interleaved({"a": lambda *a: None}, [()], rounds=4, iters=3)
