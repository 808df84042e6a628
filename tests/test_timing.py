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


def test_defaults_are_the_per_call_synchronised_method():
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
    # each name leads one round (`turn_orders`; round 0 holds the warm-ups: 3 x (2 + 3) calls, then 3 x 3)
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


# ------------------------------------------------------------------ compare: rounds, both timings, ratios

class NoisyGpu:
    """Contenders on one fake clock: a call of `name` takes base_ms[name] x (1 + noise), the noise drawn from a
    seeded generator, times a drift factor that grows with every call (a chip heating up)."""

    def __init__(self, base_ms, noise=0.0, drift_per_call=0.0, seed=0):
        self.base_ms, self.noise, self.drift = base_ms, noise, drift_per_call
        self.rng = random.Random(seed)
        self.now = 0.0
        self.log = []            # (name, set id) of every call

    def clock(self):
        return self.now

    def fns(self):
        def make(name):
            def call(set_id):
                self.log.append((name, set_id))
                factor = (1 + self.drift * len(self.log)) * (1 + self.rng.uniform(-self.noise, self.noise))
                self.now += self.base_ms[name] * factor / 1e3
            return call
        return {name: make(name) for name in self.base_ms}


def test_compare_finds_a_known_ratio_on_a_fake_clock():
    gpu = NoisyGpu({"old": 1.0, "new": 0.8, "slow": 2.5})
    cmp = timing.compare(gpu.fns(), [(0,), (1,), (2,)], baseline="old", rounds=7, calls=3, warmup=2,
                         clock=gpu.clock)
    for timing_name in timing.TIMINGS:
        new, slow = cmp.ratio("new", timing_name), cmp.ratio("slow", timing_name)
        assert new.value == pytest.approx(0.8) and new.lo == pytest.approx(0.8) and new.hi == pytest.approx(0.8)
        assert new.verdict == "faster" and new.rounds == 7
        assert slow.value == pytest.approx(2.5) and slow.verdict == "slower"
        assert cmp.ratio("old", timing_name).verdict == "noise"        # itself: exactly 1
        assert cmp.ratio("old", timing_name, against="new").value == pytest.approx(1 / 0.8)
    assert cmp.latency["new"].ms_median == pytest.approx(0.8) and len(cmp.latency["new"].samples) == 7 * 3
    assert cmp.kernel["slow"].ms_median == pytest.approx(2.5) and len(cmp.kernel["slow"].samples) == 7
    assert cmp.kernel["old"].clock == timing.PERF_COUNTER and cmp.rounds == 7


def test_compare_calls_every_contender_as_scheduled():
    gpu = NoisyGpu({"a": 1.0, "b": 1.0, "c": 1.0})
    rounds, calls, warmup, settle = 4, 3, 2, 1
    timing.compare(gpu.fns(), [(0,), (1,), (2,)], baseline="a", rounds=rounds, calls=calls, warmup=warmup,
                   settle=settle, clock=gpu.clock)
    names = [n for n, _ in gpu.log]
    per_turn = settle + calls
    assert all(names.count(n) == warmup + rounds * 2 * per_turn for n in "abc")
    # the input sets rotate over all calls together: never the same set twice in a row
    sets = [s for _, s in gpu.log]
    assert sets == [i % 3 for i in range(len(sets))]
    # who leads each round's latency turns and its back-to-back cycle: the orders of `turn_orders`, round by round
    start, leads = 3 * warmup, []
    for r in range(rounds):
        leads.append((names[start], names[start + 3 * per_turn]))
        start += 2 * 3 * per_turn
    assert leads == [("a", "a"), ("b", "b"), ("c", "c"), ("c", "c")]


@pytest.mark.parametrize("n", range(1, 9))
def test_turn_orders_give_every_position_and_every_predecessor_equally_often(n):
    from collections import Counter
    rows = timing.turn_orders(n)
    assert len(rows) == (2 * n if n % 2 and n > 1 else n)
    assert all(sorted(row) == list(range(n)) for row in rows)
    positions = Counter((row[i], i) for row in rows for i in range(n))
    assert set(positions.values()) == {len(rows) // n} and len(positions) == n * n
    follows = Counter((row[i], row[i + 1]) for row in rows for i in range(n - 1))
    assert len(follows) == n * (n - 1) and len(set(follows.values())) <= 1
    # a plain rotation would not do: each contender would always follow the same neighbour
    if n > 2:
        rotations = [tuple((i + k) % n for i in range(n)) for k in range(n)]
        assert len(Counter((r[i], r[i + 1]) for r in rotations for i in range(n - 1))) == n < len(follows)


def test_equal_contenders_come_out_as_noise():
    """Two copies of one kernel with 5 % call-to-call noise, on a drifting chip: the interval must straddle 1,
    whatever the seed of the noise."""
    for seed in range(5):
        gpu = NoisyGpu({"one": 1.0, "two": 1.0}, noise=0.05, drift_per_call=0.002, seed=seed)
        cmp = timing.compare(gpu.fns(), [(0,), (1,), (2,)], baseline="one", clock=gpu.clock)
        for timing_name in timing.TIMINGS:
            r = cmp.ratio("two", timing_name)
            assert r.verdict == "noise" and r.lo < 1 < r.hi and abs(r.value - 1) < 0.03, (seed, timing_name, r)


def test_a_small_real_difference_is_resolved_despite_drift():
    """3 % faster, 5 % call noise, and a drift that makes the last call 2.3x slower than the first: timed one
    after the other the drift would swamp the difference; round by round it cancels."""
    gpu = NoisyGpu({"old": 1.0, "new": 0.97}, noise=0.05, drift_per_call=0.001, seed=3)
    cmp = timing.compare(gpu.fns(), [(0,), (1,)], baseline="old", rounds=30, clock=gpu.clock)
    assert gpu.drift * len(gpu.log) > 1                      # the drift is large
    r = cmp.ratio("new")
    assert r.verdict == "faster" and r.lo < 0.97 < r.hi, r
    assert cmp.ratio("new", "latency").verdict == "faster"


def test_bootstrap_is_reproducible():
    rng = random.Random()
    per_round = [rng.uniform(0.9, 1.1) for _ in range(rng.randint(5, 40))]
    a, b = timing.ratio_of(per_round), timing.ratio_of(list(per_round))
    assert (a.value, a.lo, a.hi) == (b.value, b.lo, b.hi)
    assert a.lo <= a.value <= a.hi and a.value == statistics.median(per_round)
    # the interval's ends are medians of resamples, so they are values of the rounds (or means of two)
    assert min(per_round) <= a.lo and a.hi <= max(per_round)
    # and through compare: the same fake measurements, the same interval
    runs = [timing.compare((g := NoisyGpu({"x": 1.0, "y": 1.0}, noise=0.1, seed=7)).fns(), [(0,)],
                           baseline="x", rounds=9, clock=g.clock).ratio("y") for _ in range(2)]
    assert runs[0] == runs[1]


def test_ratio_verdicts_and_bad_values():
    assert timing.Ratio(0.9, 0.85, 0.95, 10).verdict == "faster"
    assert timing.Ratio(1.1, 1.05, 1.2, 10).verdict == "slower"
    assert timing.Ratio(1.0, 0.99, 1.01, 10).verdict == "noise"
    assert "noise" in str(timing.Ratio(1.0, 0.99, 1.01, 10))
    with pytest.raises(ValueError, match="at least one"):
        timing.ratio_of([])
    with pytest.raises(ValueError, match="positive"):
        timing.ratio_of([1.0, 0.0])


def test_geomean_ratio():
    a = timing.ratio_of([2.0] * 10)
    b = timing.ratio_of([0.5] * 10)
    g = timing.geomean_ratio([a, b])
    assert g.value == pytest.approx(1.0) and g.lo == pytest.approx(1.0) and g.hi == pytest.approx(1.0)
    rng = random.Random(1)
    noisy = [timing.ratio_of([rng.gauss(0.9, 0.02) for _ in range(20)]) for _ in range(4)]
    g = timing.geomean_ratio(noisy)
    assert g.lo < g.value < g.hi < 1 and g.verdict == "faster"
    assert g == timing.geomean_ratio(noisy)                      # reproducible
    with pytest.raises(ValueError, match="per_round"):
        timing.geomean_ratio([timing.Ratio(1.0, 0.9, 1.1, 5)])


def test_compare_frame_goes_into_records(tmp_path):
    from workbook import records
    gpu = NoisyGpu({"ours/step1": 1.0, "ours/step2": 0.5, ("flashlib", "cute"): 2.0})
    cmp = timing.compare(gpu.fns(), [(0,)], baseline="ours/step1", rounds=3, calls=2, warmup=0, clock=gpu.clock)
    df = cmp.frame({"N": 8, "D": 16, "K": 4}, against={("flashlib", "cute"): "ours/step2"}, flops=2e9,
                   match_rate={"ours/step2": 0.5})
    assert len(df) == 3 * 2 and set(df.timing) == set(timing.TIMINGS)
    row = df[(df.variant == "step2") & (df.timing == "kernel")].iloc[0]
    assert (row.kernel, row.N, row.vs, row.verdict, row.rounds, row.calls) == ("ours", 8, "ours/step1", "faster", 3, 2)
    assert row.ratio == pytest.approx(0.5) and row.match_rate == 0.5 and row.tflops == pytest.approx(4.0)
    flash = df[(df.kernel == "flashlib") & (df.timing == "latency")].iloc[0]
    assert flash.vs == "ours/step2" and flash.ratio == pytest.approx(4.0)
    assert row.ms_lo == pytest.approx(0.5) and row.ms_hi == pytest.approx(0.5)
    also = cmp.frame(also={"flashlib": ("flashlib", "cute"), "absent": "nobody"})
    first = also[(also.variant == "step1") & (also.timing == "kernel")].iloc[0]
    assert first.ratio_flashlib == pytest.approx(0.5) and math.isnan(first.ratio_absent_hi)
    assert cmp.interval("ours/step1").value == pytest.approx(1.0)
    target = records.append("cpu", "steps", df, root=tmp_path)
    back = records.read("cpu", "steps", root=tmp_path)
    assert len(back) == 6 and "ratio_lo" in back.columns and target.exists()
    assert "ours/step2" in str(cmp) and "3 rounds" in str(cmp)


def test_compare_kernel_time_only():
    gpu = NoisyGpu({"a": 1.0, "b": 2.0})
    cmp = timing.compare(gpu.fns(), [(0,)], baseline="a", rounds=2, calls=1, warmup=0, synchronised=False,
                         clock=gpu.clock)
    assert len(gpu.log) == 2 * 2 * (1 + 1) and not cmp.latency
    assert cmp.ratio("b").value == pytest.approx(2.0)
    with pytest.raises(ValueError, match="not measured"):
        cmp.ratio("b", "latency")
    assert set(cmp.frame().timing) == {"kernel"}


@pytest.mark.parametrize("kwargs, match", [
    (dict(fns={}), "non-empty"),
    (dict(fns={"a": 3}), "callable"),
    (dict(baseline="zzz"), "baseline"),
    (dict(input_sets=[]), "input_sets"),
    (dict(rounds=0), "rounds"),
    (dict(calls=0), "calls"),
    (dict(warmup=-1), "warmup"),
])
def test_compare_rejects_bad_arguments(kwargs, match):
    args = dict(fns={"a": lambda *x: None}, input_sets=[()], baseline="a")
    args.update(kwargs)
    fns, sets = args.pop("fns"), args.pop("input_sets")
    with pytest.raises(ValueError, match=match):
        timing.compare(fns, sets, **args)
    cmp = timing.compare({"a": lambda *x: None}, [()], baseline="a", rounds=1, calls=1, warmup=0)
    with pytest.raises(ValueError, match="timing"):
        cmp.ratio("a", "wall")
    with pytest.raises(ValueError, match="not compared"):
        cmp.ratio("b")


def test_cycles_rotate_and_time_each_contender():
    gpu = NoisyGpu({"a": 1.0, "b": 3.0})
    got = timing.cycles(gpu.fns(), [(0,), (1,)], 3, calls=2, settle=1, first=1, clock=gpu.clock)
    assert [c["b"] for c in got] == pytest.approx([3.0] * 3) and [c["a"] for c in got] == pytest.approx([1.0] * 3)
    # cycle 1 starts with b (rotated once), cycle 2 with a, cycle 3 with b; each turn is 1 settling + 2 timed calls
    assert [gpu.log[i][0] for i in (0, 6, 12)] == ["b", "a", "b"]
    with pytest.raises(ValueError, match="count"):
        timing.cycles(gpu.fns(), [(0,)], 0)


@pytest.mark.gpu
@requires_cuda
def test_compare_on_gpu_resolves_a_kernel_twice_as_long():
    sets = [(torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16),) for _ in range(3)]
    cmp = timing.compare({"once": lambda a: a @ a, "twice": lambda a: (a @ a, a @ a)}, sets, baseline="once",
                         rounds=10, calls=5, warmup=3)
    r = cmp.ratio("twice")
    assert r.verdict == "slower" and 1.6 < r.value < 2.4, r
    assert cmp.kernel["once"].clock == timing.CUDA_EVENTS and len(cmp.latency["once"].samples) == 50
