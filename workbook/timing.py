"""How every kernel in the workbook is timed: the seeds' method, in one function.

    t = bench(fn, [(x0, c0), (x1, c1), (x2, c2)])    # 10 warm-up calls, 30 timed calls
    t.ms_median, t.ms_min, t.ms_max, t.samples

The method of the PRs this workbook reproduces (seed 000):

* several independently seeded input sets, rotated between calls, so that a call does not simply
  find the previous call's inputs and outputs still in L2;
* 10 warm-up calls (JIT compilation, caches, clocks), then 30 timed calls;
* each timed call bracketed by two CUDA events and synchronized, so a sample is one call's time
  on the GPU from the moment the stream reached it; this includes the call's launch latency
  (a few microseconds), exactly as the PR's numbers do;
* the median of the 30 samples is the reported latency (robust to the odd preempted call).

With no CUDA tensor among the inputs the same loop runs on the host and times each call with
`time.perf_counter`. That path exists to test the harness on a machine without a GPU; CPU times
are never a stand-in for GPU times. `Timing.clock` says which clock produced the samples.

The summaries of many timings live here too: `geomean` and `geomean_speedup_pct`, the statistic
every table of the seeds reports.
"""
from __future__ import annotations

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
    them, after `warmup` calls: the kernel's own time, without the host time the seeds' method counts (`bench`).
    Input sets rotate as in `bench`. CUDA only; the probes in tools/probes/ compare the two methods with it."""
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
    comes first runs on the coolest chip. On the H200 the *same* kernel timed twice in a row, 40 calls of
    ~4 ms apart, read 3.68 and 4.15 ms (data/measured/h200/kmeans_assign.csv, the rows of commit c3fd2f6), and
    one torch.matmul at 4096^3 read 0.175 and 0.205 ms in two rounds a minute apart
    (data/measured/h200/probes/gemm_narrow_rounds.csv). So every contender first gets its `warmup` calls, then
    the timed calls go in `rounds` rounds (default `iters`: one call of each contender per round), the order
    rotating from round to round, each call timed on its own as `bench` times it. The drift is shared out
    instead of handed to the last in line; with one call per round, contenders that take turns call by call
    see the same chip. The input sets rotate over all calls of all contenders together, so no call finds the
    previous call's inputs (the same tensors for every contender) still in L2.

    Every later turn starts with `settle` untimed calls, so a timed call follows a call of its own contender:
    on the H200, taking turns call by call with our CUDA-graph launches, torch.matmul at 4096^3 read 13 % slower
    in one benchmark run (probes/gemm_bench_unsettled_turns_4c5b42d.csv) and 3 % slower than taking turns with
    itself in one probe (probes/gemm_turns.csv), though not in a second: a cost of taking turns, not of either
    kernel, and one that settling removes.
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
        for name in names[r % len(names):] + names[:r % len(names)]:
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

    This is how the seeds summarize a table (seed 000: "7.77% geometric-mean speedup"); it is not
    the arithmetic mean of the percentages, which overweights the large ones.
    """
    return (geomean(1.0 + p / 100.0 for p in speedups_pct) - 1.0) * 100.0
