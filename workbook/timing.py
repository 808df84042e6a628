"""How every kernel in the workbook is timed: the per-call synchronised method, in one function.

    t = bench(fn, [(x0, c0), (x1, c1), (x2, c2)])    # 10 warm-up calls, 30 timed calls
    t.ms_median, t.ms_min, t.ms_max, t.samples

The per-call synchronised method, the one by which the PRs this workbook reproduces report their numbers:

* several input sets, drawn independently, rotated between calls, so that a call does not simply
  find the previous call's inputs and outputs still in L2;
* 10 warm-up calls (JIT compilation, caches, clocks), then 30 timed calls;
* each timed call bracketed by two CUDA events and synchronized, so a sample is one call's time
  on the GPU from the moment the stream reached it; this includes the call's launch latency
  (a few microseconds), exactly as the PR's numbers do;
* the median of the 30 samples is the reported latency (robust to the odd preempted call).

With no CUDA tensor among the inputs the same loop runs on the host and times each call with
`time.perf_counter`. That path exists to test the harness on a machine without a GPU; CPU times
are never a stand-in for GPU times. `Timing.clock` says which clock produced the samples.

Telling two kernels apart: `compare`.

    cmp = compare({"serial": f1, "ilp2": f2}, sets, baseline="serial")   # 20 interleaved rounds
    cmp.ratio("ilp2")                     # Ratio(value=0.998, lo=0.991, hi=1.004, rounds=20): "noise"
    cmp.ratio("ilp2", timing="latency")   # the same from the per-call synchronised calls
    records.append("h200", "table", cmp.frame({"N": N, "D": D, "K": K}))

A GPU's clock drifts by several percent within a minute, more than a tuning step changes. `compare` has the
contenders take turns in rounds of a few milliseconds, times each in a round both ways (per-call
synchronised calls, and calls back to back with no host sync: the kernel's own time, `cycles`), forms each
ratio round by round (the drift is common to a round and cancels), and reports the median ratio with a
bootstrap 95 % interval over the rounds. An interval that straddles 1 is called noise.

The summaries of many timings live here too: `geomean` and `geomean_speedup_pct`, the statistic
every table of those PRs reports, and `geomean_ratio` for Ratios.
"""
from __future__ import annotations

import functools
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

CUDA_EVENTS = "cuda_events"
PERF_COUNTER = "perf_counter"


@dataclass(frozen=True)
class Timing:
    """Latencies of `len(samples)` timed calls, in milliseconds."""
    ms_min: float
    ms_median: float
    ms_max: float
    samples: tuple[float, ...]
    clock: str = CUDA_EVENTS

    def tflops(self, flops: float) -> float:
        """Throughput at the median latency, in TFLOP/s, for a call that does `flops` operations."""
        return flops / (self.ms_median * 1e-3) / 1e12

    def __str__(self) -> str:
        where = "GPU" if self.clock == CUDA_EVENTS else "CPU, harness test only"
        return (f"median {self.ms_median:.4f} ms (min {self.ms_min:.4f}, max {self.ms_max:.4f}; "
                f"{len(self.samples)} calls, {where})")


def _has_cuda_tensor(args: Iterable[Any]) -> bool:
    return any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def bench(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], warmup: int = 10, iters: int = 30,
          *, clock: Callable[[], float] | None = None, offset: int = 0) -> Timing:
    """Time `fn(*input_sets[(offset + i) % len(input_sets)])`, call i = 0, 1, 2, ... (warm-up calls first).

    `input_sets` is a sequence of argument tuples. If any argument is a CUDA tensor the calls are
    timed with CUDA events on the current stream; otherwise with `clock` (seconds, default
    `time.perf_counter`), which is only meant for testing this harness without a GPU.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    if isinstance(input_sets, (str, bytes)) or not isinstance(input_sets, Sequence) or len(input_sets) == 0:
        raise ValueError("input_sets must be a non-empty sequence of argument tuples, e.g. [(x0, c0), (x1, c1)]")
    for i, args in enumerate(input_sets):
        if not isinstance(args, (tuple, list)):
            raise ValueError(f"input_sets[{i}] must be a tuple or list of arguments, got {type(args).__name__}; "
                             f"wrap a single argument as (arg,)")
    _check_count("warmup", warmup, 0)
    _check_count("iters", iters, 1)
    _check_count("offset", offset, 0)

    on_gpu = any(_has_cuda_tensor(args) for args in input_sets)
    if on_gpu and clock is not None:
        raise ValueError("clock= only applies to CPU timing; CUDA tensors are timed with CUDA events")

    n = len(input_sets)
    for i in range(warmup):
        fn(*input_sets[(offset + i) % n])

    samples: list[float] = []
    if on_gpu:
        torch.cuda.synchronize()
        for i in range(warmup, warmup + iters):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*input_sets[(offset + i) % n])
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
    else:
        now = clock or time.perf_counter
        for i in range(warmup, warmup + iters):
            t0 = now()
            fn(*input_sets[(offset + i) % n])
            samples.append((now() - t0) * 1e3)
        if any(s < 0 for s in samples):
            raise ValueError("the clock went backwards; pass a monotonic clock")

    return Timing(ms_min=min(samples), ms_median=statistics.median(samples), ms_max=max(samples),
                  samples=tuple(samples), clock=CUDA_EVENTS if on_gpu else PERF_COUNTER)


def back_to_back(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], calls: int, warmup: int = 10
                 ) -> tuple[float, float]:
    """(GPU ms per call, host ms per call) of `calls` calls launched back to back, with no synchronisation between
    them, after `warmup` calls: the kernel's own time, without the host time the per-call synchronised method counts (`bench`).
    Input sets rotate as in `bench`. CUDA only; `compare` times both methods, round by round."""
    _check_count("calls", calls, 1)
    _check_count("warmup", warmup, 0)
    n = len(input_sets)
    for i in range(warmup):
        fn(*input_sets[i % n])
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for i in range(calls):
        fn(*input_sets[i % n])
    host_ms = (time.perf_counter() - t0) * 1e3 / calls
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls, host_ms


def bench_interleaved(fns: Mapping[str, Callable[..., Any]], input_sets: Sequence[Sequence[Any]],
                      rounds: int | None = None, warmup: int = 10, iters: int = 30, *, settle: int = 1,
                      clock: Callable[[], float] | None = None) -> dict[str, Timing]:
    """`bench` for several contenders at once, interleaved: {name: Timing of `iters` calls}.

    A GPU's clock drifts while it works (power and temperature limits): timed one after the other, whoever
    comes first runs on the coolest chip. On the H200 the *same* kernel timed twice in a row has read 13 %
    apart, and one vendor library call 17 % apart in two rounds a minute apart (notes/perf-log.md). So every
    contender first gets its `warmup` calls, then the timed calls go in `rounds` rounds (default `iters`: one
    call of each contender per round), the order changing from round to round (`turn_orders`), each call timed
    on its own as `bench` times it. The drift is shared out
    instead of handed to the last in line; with one call per round, contenders that take turns call by call
    see the same chip. The input sets rotate over all calls of all contenders together, so no call finds the
    previous call's inputs (the same tensors for every contender) still in L2.

    Every later turn starts with `settle` untimed calls, so a timed call follows a call of its own contender:
    on the H200 a vendor library call taking turns call by call with our CUDA-graph launches has read up to
    13 % slower than it runs (notes/perf-log.md): a cost of taking turns, not of either kernel, and one that
    settling removes.
    """
    rounds = iters if rounds is None else rounds
    _check_count("rounds", rounds, 1)
    _check_count("iters", iters, rounds)
    _check_count("warmup", warmup, 0)
    _check_count("settle", settle, 0)
    names = list(fns)
    calls = 0                                # calls so far, all contenders: where the input-set rotation stands
    samples: dict[str, list[float]] = {name: [] for name in names}
    clocks: dict[str, str] = {}
    for r in range(rounds):
        block = iters // rounds + (1 if r < iters % rounds else 0)
        for name in _turn_order(names, r):
            first = warmup if r == 0 else settle
            t = bench(fns[name], input_sets, warmup=first, iters=block, clock=clock, offset=calls)
            calls += first + block
            samples[name].extend(t.samples)
            clocks[name] = t.clock
    return {name: Timing(ms_min=min(v), ms_median=statistics.median(v), ms_max=max(v), samples=tuple(v),
                         clock=clocks[name]) for name, v in samples.items()}


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive numbers (latencies, ratios)."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("geomean of no values")
    if any(not (v > 0 and math.isfinite(v)) for v in vals):
        raise ValueError(f"geomean needs finite positive values, got {vals}")
    return math.exp(math.fsum(math.log(v) for v in vals) / len(vals))


def geomean_speedup_pct(speedups_pct: Iterable[float]) -> float:
    """The geometric-mean speedup of per-case speedups given in percent: geomean(1 + p/100) - 1, in percent.

    This is how the PRs the workbook reproduces summarise a table ("7.77% geometric-mean speedup"); it is not
    the arithmetic mean of the percentages, which overweights the large ones.
    """
    return (geomean(1.0 + p / 100.0 for p in speedups_pct) - 1.0) * 100.0


# ---------------------------------------------------------------------------------------------------
# Comparing contenders: interleaved rounds, both timings, ratios with confidence intervals

LATENCY = "latency"
KERNEL = "kernel"
TIMINGS = (LATENCY, KERNEL)
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240917            # fixed: the same rounds always give the same interval


def _turn_order(names: list, r: int) -> list:
    """The contenders' order in round r: row r of a Williams design (`turn_orders`), so that over its rows each
    contender leads as often as any other and follows each other contender as often as any other. A plain
    rotation keeps each contender behind the same neighbour in every round, and a contender that follows a long,
    hot kernel runs at the clock that kernel left (the power cap): in the H200's floor tables one k-means kernel
    under two names read 6-14 % apart, the name behind flashlib's Triton kernel slower, and on an H100 a copy
    behind it read up to 17 % slower than the copy behind itself (notes/perf-log.md)."""
    rows = turn_orders(len(names))
    return [names[i] for i in rows[r % len(rows)]]


@functools.lru_cache(maxsize=None)
def turn_orders(n: int) -> tuple[tuple[int, ...], ...]:
    """A Williams design for n contenders: n orders (2n for odd n), each a permutation of range(n), in which
    every contender takes every position, and directly follows every other contender, equally often. Row 0 is
    0, 1, n-1, 2, n-2, ...; row i adds i to each entry (mod n); for odd n the reversed rows follow."""
    _check_count("n", n, 1)
    first = [0] + [(k + 1) // 2 if k % 2 else n - k // 2 for k in range(1, n)]
    rows = [tuple((v + i) % n for v in first) for i in range(n)]
    if n % 2 and n > 1:
        rows += [row[::-1] for row in rows]
    return tuple(rows)


def cycles(fns: Mapping[Any, Callable[..., Any]], input_sets: Sequence[Sequence[Any]], count: int, *,
           calls: int = 1, settle: int = 1, offset: int = 0, first: int = 0,
           clock: Callable[[], float] | None = None) -> list[dict[Any, float]]:
    """Kernel time back to back, drift cancelled: `count` cycles; in cycle i every contender, in order i of
    `turn_orders`, gets `settle` untimed calls and then `calls` calls between two events, all of them enqueued on
    one stream with no host synchronisation until the cycle ends. Returns one {name: ms per call} per cycle.

    A cycle lasts a few kernel times, so the clock's drift (power and temperature) hits every contender of a
    cycle alike and the per-cycle ratio of two contenders cancels it; the orders share out the position in
    the cycle and the neighbour before (cycles are numbered from `first`, so that a caller timing one cycle at a
    time goes on through the orders). The
    settling call puts a timed call after a call of its own contender and keeps the stream busy when the first
    event is recorded. Input sets rotate over all calls of all contenders, starting at `offset`.
    With no CUDA tensor among the inputs the calls are timed with `clock` (default `time.perf_counter`), to test
    this function without a GPU.
    """
    _check_count("count", count, 1)
    _check_count("calls", calls, 1)
    _check_count("settle", settle, 0)
    _check_count("offset", offset, 0)
    _check_count("first", first, 0)
    names = list(fns)
    if not names:
        raise ValueError("no contenders to time")
    n = len(input_sets)
    on_gpu = any(_has_cuda_tensor(args) for args in input_sets)
    if on_gpu and clock is not None:
        raise ValueError("clock= only applies to CPU timing; CUDA tensors are timed with CUDA events")
    now = clock or time.perf_counter

    def mark():
        """A point in time: a recorded CUDA event on the GPU, the clock's reading on the host."""
        if not on_gpu:
            return now()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    position = offset
    out = []
    for i in range(first, first + count):
        marks: dict[Any, tuple[Any, Any]] = {}
        if on_gpu:
            torch.cuda.synchronize()
        for name in _turn_order(names, i):
            fn = fns[name]
            for _ in range(settle):
                fn(*input_sets[position % n])
                position += 1
            start = mark()
            for _ in range(calls):
                fn(*input_sets[position % n])
                position += 1
            marks[name] = (start, mark())
        if on_gpu:
            torch.cuda.synchronize()
            out.append({name: s.elapsed_time(e) / calls for name, (s, e) in marks.items()})
        else:
            ms = {name: (e - s) * 1e3 / calls for name, (s, e) in marks.items()}
            if any(v < 0 for v in ms.values()):
                raise ValueError("the clock went backwards; pass a monotonic clock")
            out.append(ms)
    return out


@dataclass(frozen=True)
class Ratio:
    """The median over rounds of (contender's time / reference's time) in the same round, and its 95 % interval.

    `verdict`: "faster" when the whole interval lies below 1, "slower" when above, else "noise" (the interval
    straddles 1: this many rounds cannot tell the two apart). `per_round` keeps the ratios of the rounds."""
    value: float
    lo: float
    hi: float
    rounds: int
    per_round: tuple[float, ...] = ()

    @property
    def verdict(self) -> str:
        if self.hi < 1.0:
            return "faster"
        if self.lo > 1.0:
            return "slower"
        return "noise"

    def __str__(self) -> str:
        return f"{self.value:.3f}x [{self.lo:.3f}, {self.hi:.3f}] ({self.verdict}, {self.rounds} rounds)"


def _bootstrap_medians(values: Sequence[float], resamples: int, seed: int):
    import numpy as np
    v = np.asarray(values, dtype=float)
    rng = np.random.Generator(np.random.PCG64(seed))
    return np.median(v[rng.integers(0, len(v), size=(resamples, len(v)))], axis=1)


def ratio_of(per_round: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
             seed: int = BOOTSTRAP_SEED) -> Ratio:
    """A Ratio from per-round ratios: the median, and the 2.5 and 97.5 percentiles of the medians of
    `resamples` bootstrap resamples of the rounds (drawn with a fixed `seed`, so the interval is reproducible)."""
    import numpy as np
    vals = [float(r) for r in per_round]
    if not vals:
        raise ValueError("a ratio needs at least one round")
    if any(not (v > 0 and math.isfinite(v)) for v in vals):
        raise ValueError(f"per-round ratios must be finite and positive, got {vals}")
    lo, hi = np.quantile(_bootstrap_medians(vals, resamples, seed), [0.025, 0.975])
    return Ratio(value=float(statistics.median(vals)), lo=float(lo), hi=float(hi), rounds=len(vals),
                 per_round=tuple(vals))


def geomean_ratio(ratios: Sequence[Ratio], *, resamples: int = BOOTSTRAP_RESAMPLES,
                  seed: int = BOOTSTRAP_SEED) -> Ratio:
    """The geometric mean of several Ratios (one per shape) with a 95 % interval: every shape's rounds are
    resampled independently, and the interval is the percentiles of the geomean of the resampled medians.
    `rounds` of the result is the smallest number of rounds of its parts."""
    import numpy as np
    if not ratios:
        raise ValueError("geomean of no ratios")
    if any(not r.per_round for r in ratios):
        raise ValueError("each Ratio needs its per_round values (made by ratio_of or Comparison.ratio)")
    logs = np.stack([np.log(_bootstrap_medians(r.per_round, resamples, seed + i)) for i, r in enumerate(ratios)])
    lo, hi = np.exp(np.quantile(logs.mean(axis=0), [0.025, 0.975]))
    return Ratio(value=geomean(r.value for r in ratios), lo=float(lo), hi=float(hi),
                 rounds=min(r.rounds for r in ratios))


@dataclass(frozen=True)
class Comparison:
    """What `compare` measured. `latency[name]`: every synchronised call (`bench`'s method); `kernel[name]`: one
    sample per round, the mean of that round's back-to-back calls. `per_round[timing][name]`: the per-round
    value of each timing (for latency, the median of the round's calls) from which ratios are formed."""
    names: tuple[Any, ...]
    baseline: Any
    latency: Mapping[Any, Timing]
    kernel: Mapping[Any, Timing]
    per_round: Mapping[str, Mapping[Any, tuple[float, ...]]]
    calls: int

    @property
    def rounds(self) -> int:
        return len(next(iter(self.per_round[KERNEL].values())))

    def timing(self, name: Any, timing: str = KERNEL) -> Timing:
        _check_timing(timing, self.per_round)
        return (self.latency if timing == LATENCY else self.kernel)[name]

    def ratio(self, name: Any, timing: str = KERNEL, *, against: Any = None) -> Ratio:
        """`name`'s time / `against`'s (default: the baseline), round by round, as a Ratio (< 1: name is faster)."""
        _check_timing(timing, self.per_round)
        against = self.baseline if against is None else against
        for who in (name, against):
            if who not in self.names:
                raise ValueError(f"{who!r} was not compared; contenders: {list(self.names)}")
        mine, theirs = self.per_round[timing][name], self.per_round[timing][against]
        return ratio_of([a / b for a, b in zip(mine, theirs)])

    def interval(self, name: Any, timing: str = KERNEL) -> Ratio:
        """The median over rounds of `name`'s per-round time (ms) with its bootstrap 95 % interval (a Ratio's
        fields, read as milliseconds)."""
        _check_timing(timing, self.per_round)
        return ratio_of(self.per_round[timing][name])

    def frame(self, columns: Mapping[str, Any] | None = None, *, against: Mapping[Any, Any] | None = None,
              also: Mapping[str, Any] | None = None, flops: float = 0.0,
              match_rate: Mapping[Any, float] | float = 1.0,
              identity: Callable[[Any], tuple[str, str]] | None = None):
        """One row per contender and timing, ready for `workbook.records.append`: kernel, variant, timing,
        the constant `columns` (a shape: N, D, K), ms_median/min/max over all samples, ms_lo/ms_hi (the 95 %
        interval of the median over rounds), tflops (of `flops` per call), match_rate, and the ratio to
        `against[name]` (default: the baseline) with its interval, verdict and rounds. `also={label: other}`
        adds ratio_<label>, ratio_<label>_lo, ratio_<label>_hi against `other` (NaN if it was not compared).
        `identity(name) -> (kernel, variant)`; by default "kernel/variant" names are split at the first "/",
        a tuple name is taken as is, and any other name becomes (name, "")."""
        import pandas as pd
        identity = identity or _identity
        rows = []
        for name in self.names:
            kernel, variant = identity(name)
            ref = (against or {}).get(name, self.baseline)
            for timing in self.per_round:
                t, ms = self.timing(name, timing), self.interval(name, timing)
                r = self.ratio(name, timing, against=ref)
                rate = match_rate.get(name, 1.0) if isinstance(match_rate, Mapping) else match_rate
                row = {"kernel": kernel, "variant": variant, "timing": timing, **(columns or {}),
                       "ms_median": t.ms_median, "ms_min": t.ms_min, "ms_max": t.ms_max, "ms_lo": ms.lo,
                       "ms_hi": ms.hi, "tflops": t.tflops(flops) if flops else 0.0, "match_rate": float(rate),
                       "vs": "/".join(identity(ref)).strip("/"), "ratio": r.value, "ratio_lo": r.lo,
                       "ratio_hi": r.hi, "verdict": r.verdict, "rounds": r.rounds, "calls": self.calls}
                for label, other in (also or {}).items():
                    o = self.ratio(name, timing, against=other) if other in self.names else None
                    row.update({f"ratio_{label}": o.value if o else math.nan,
                                f"ratio_{label}_lo": o.lo if o else math.nan,
                                f"ratio_{label}_hi": o.hi if o else math.nan})
                rows.append(row)
        return pd.DataFrame(rows)

    def __str__(self) -> str:
        lines = []
        for name in self.names:
            cells = []
            for timing in self.per_round:
                t = self.timing(name, timing)
                cell = f"{timing} {t.ms_median:.4g} ms"
                if name != self.baseline:
                    cell += f" = {self.ratio(name, timing)}"
                cells.append(cell)
            lines.append(f"{'/'.join(_identity(name)).strip('/')}: " + "; ".join(cells))
        return f"vs {'/'.join(_identity(self.baseline)).strip('/')}, {self.rounds} rounds\n" + "\n".join(lines)


def _identity(name: Any) -> tuple[str, str]:
    if isinstance(name, tuple) and len(name) == 2:
        return str(name[0]), str(name[1])
    kernel, _, variant = str(name).partition("/")
    return kernel, variant


def _check_timing(timing: str, measured: Mapping[str, Any]) -> None:
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
    if timing not in measured:
        raise ValueError(f"{timing} was not measured (compare(..., synchronised=False) times only the kernel)")


def compare(fns: Mapping[Any, Callable[..., Any]], input_sets: Sequence[Sequence[Any]], *, baseline: Any,
            rounds: int = 20, calls: int = 10, warmup: int = 10, synchronised: bool = True, settle: int = 1,
            clock: Callable[[], float] | None = None) -> Comparison:
    """Time several contenders against a baseline in interleaved rounds; both timings, ratios with intervals.

    Every contender first gets `warmup` untimed calls. Then, in each of `rounds` rounds, the contenders take
    turns in an order that changes from round to round (`turn_orders`: each leads, and follows each other, equally
    often), and each gets
      (a) with `synchronised`, `calls` synchronised calls, each between two CUDA events (`bench`): the latency
          a user sees, launch included, as the reproduced PRs measured it;
      (b) `calls` calls back to back between two events, no host synchronisation (`cycles`): the kernel's
          own time.
    A round lasts milliseconds, so the GPU's clock drift is the same for every contender of a round; each
    ratio is formed round by round and summarised by its median, with a bootstrap 95 % interval over the
    rounds (`Comparison.ratio`). Input sets rotate over all calls of all contenders (no call finds its inputs
    in L2 from the call before). Without CUDA tensors the same schedule runs on the host with `clock`
    (default `time.perf_counter`): only to test this harness.
    """
    if not isinstance(fns, Mapping) or not fns:
        raise ValueError("fns must be a non-empty mapping {name: callable}")
    for name, fn in fns.items():
        if not callable(fn):
            raise ValueError(f"fns[{name!r}] must be callable, got {type(fn).__name__}")
    if baseline not in fns:
        raise ValueError(f"baseline {baseline!r} is not among the contenders {list(fns)}")
    if isinstance(input_sets, (str, bytes)) or not isinstance(input_sets, Sequence) or len(input_sets) == 0:
        raise ValueError("input_sets must be a non-empty sequence of argument tuples, e.g. [(x0, c0), (x1, c1)]")
    _check_count("rounds", rounds, 1)
    _check_count("calls", calls, 1)
    _check_count("warmup", warmup, 0)
    _check_count("settle", settle, 0)
    names = list(fns)
    n = len(input_sets)
    position = 0
    for name in names:
        for _ in range(warmup):
            fns[name](*input_sets[position % n])
            position += 1
    latency_samples: dict[Any, list[float]] = {name: [] for name in names}
    per_round: dict[str, dict[Any, list[float]]] = {KERNEL: {name: [] for name in names}}
    if synchronised:
        per_round = {LATENCY: {name: [] for name in names}, **per_round}
    clocks = {}
    for r in range(rounds):
        if synchronised:
            for name in _turn_order(names, r):
                t = bench(fns[name], input_sets, warmup=settle, iters=calls, clock=clock, offset=position)
                position += settle + calls
                latency_samples[name].extend(t.samples)
                per_round[LATENCY][name].append(t.ms_median)
                clocks[name] = t.clock
        got, = cycles(fns, input_sets, 1, calls=calls, settle=settle, offset=position, first=r, clock=clock)
        position += len(names) * (settle + calls)
        for name in names:
            per_round[KERNEL][name].append(got[name])
    on_gpu = any(_has_cuda_tensor(args) for args in input_sets)
    clock_name = CUDA_EVENTS if on_gpu else PERF_COUNTER

    def timing_of(v: Sequence[float]) -> Timing:
        return Timing(ms_min=min(v), ms_median=statistics.median(v), ms_max=max(v), samples=tuple(v),
                      clock=clock_name)

    return Comparison(names=tuple(names), baseline=baseline,
                      latency={name: timing_of(v) for name, v in latency_samples.items()} if synchronised else {},
                      kernel={name: timing_of(v) for name, v in per_round[KERNEL].items()},
                      per_round={t: {name: tuple(v) for name, v in d.items()} for t, d in per_round.items()},
                      calls=calls)
