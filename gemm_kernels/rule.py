"""The per-shape configuration rule of the Hopper GEMM, learned from a recorded sweep (`gemm_kernels.sweep`).

    rule.choose(16, 4096, 4096)       # "64x128 stream-k cluster1": a name of configs.HOPPER_CANDIDATES
    rule.options_for(16, 4096, 4096)  # its hopper_options.Options: what gemm(a, b) runs with no options given
    rule.contenders(16, 4096, 4096)   # what gemm(a, b, autotune=True) times there instead
    rule.fit(frame)                   # a Rule from sweep rows (pandas), e.g. records.read("h200", sweep.TABLE)
    python -m gemm_kernels.rule --fit # learn from data/measured/h200/gemm_config_sweep.csv -> rule_h200.json

The rule: score each candidate at each measured shape by the geometric mean of its ratios to torch.matmul
(kernel time back to back, the latency a user sees, and the GPU's own kernel durations); for a new shape, take
the `NEIGHBOURS` measured shapes nearest to it in (log2 M, log2 N, log2 K) and choose the candidate with the best
mean log score over them, each weighted by 1 / (its squared distance + `DISTANCE_SMOOTHING`). A shape the sweep
measured takes the candidate measured best there: its neighbours can only blur that (4097 x 4104 x 4104 sits at
distance 0 from 4096^3 in log size, yet stream-K pays there and not at 4096^3). Nothing is timed at call time.
`leave_one_out` says how well the rule predicts shapes it has not seen.

The pitch of the rows may count too: where the rows of A or B do not start on 128-byte lines (`rows_on_lines`),
each TMA box row touches two lines, and the single-CTA candidates lose up to a fifth of their speed where the CTA
pairs, loading half of B's boxes each, lose a few per cent (notes/perf-log.md). Two shapes that differ in this sit
`PITCH_DISTANCE` apart (in log2 units) on top of their distance in size. The recorded sweep's leave-one-out favours
1 over 0, 0.5, 2, 4 and 8, and at sixteen shapes where the two pick differently the picks at 1 ran 1.09x faster in
geometric mean (`data/measured/h200/probes/gemm_rule_pitch_probe.py`, an H100). It ships at 0 until notebook 16,
whose outputs show the rule's choices, is re-executed with it on an H200 (`notes/patches/gemm-rule-pitch-on.patch`).

Few-wave shapes (under `FEW_WAVES` waves of the default tiles) are where nearness in log size misleads: 384 rows
are three 128-row tiles but one and a half CTA pairs, so a neighbour's best candidate can waste a third of the GPU
here. There each neighbour's score is carried over by the planner's prediction (`planned_log_time`: the wave
model's makespan of that candidate at both shapes, `gemm_kernels.waves`): score here = score there + log(planned
time here / planned time there). Many-wave shapes keep the plain neighbours' mean, where the makespan ratio is
nearly the same for every candidate and the measured per-slot speed decides.

The learned rule is data: `rule_h200.json` beside this file holds the scores per shape and candidate with
the sweep's provenance (GPU, driver, commit, date). It was measured on an H200; on another Hopper GPU the
same choice is still a correct kernel, only perhaps not the fastest one.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from gemm_kernels import configs, hopper_options

NEIGHBOURS = 3
PITCH_DISTANCE = 0.0   # rows on 128-byte lines or not; 1.0 would be as far apart as a factor of two in one dimension
LINE_BYTES = 128
DISTANCE_SMOOTHING = 0.25   # neighbour weights 1 / (squared log2 distance + this): a measured shape weighs 4
FEW_WAVES = 2.0        # below this many waves of the default tiles the rule corrects by the planner (module doc)
RULE_FILE = Path(__file__).with_name("rule_h200.json")
TIMINGS = ("kernel", "latency", "gpu")   # every timing the sweep records (gpu: CUPTI kernel durations)


@dataclass(frozen=True)
class Rule:
    """Measured shapes, candidates, log scores[shape][candidate] (NaN where a candidate was not timed) and the
    planner's log time planned[shape][candidate] (`planned_log_time`, NaN where it plans nothing)."""
    shapes: tuple[tuple[int, int, int], ...]
    candidates: tuple[str, ...]
    scores: tuple[tuple[float, ...], ...]
    provenance: dict
    planned: tuple[tuple[float, ...], ...]

    def choose(self, M: int, N: int, K: int, *, without: tuple[int, int, int] | None = None) -> str:
        """The candidate measured best at (M, N, K) where the sweep measured it; elsewhere the one with the best
        mean score over the measured shapes nearest to it, each carried over by the planner where (M, N, K) is a
        few-wave shape (`few_waves`). `without`: a shape to leave out, for `leave_one_out`."""
        here = self.measured.get((M, N, K)) if (M, N, K) != without else None
        if here is not None:
            timed = [(v, name) for v, name in zip(self.scores[here], self.candidates) if not math.isnan(v)]
            if timed:
                return min(timed)[1]
        near = self.neighbours(M, N, K, without=without)
        if not near:
            return configs.HOPPER_FALLBACK
        correct = few_waves(M, N)
        weights = [1 / (d + DISTANCE_SMOOTHING) for _, d in near]
        best, best_score = configs.HOPPER_FALLBACK, math.inf
        for j, name in enumerate(self.candidates):
            values = [self.scores[i][j] for i, _ in near]
            if correct:
                here = planned_log_time(name, M, N, K)
                values = [v + here - self.planned[i][j] for v, (i, _) in zip(values, near)]
            if any(math.isnan(v) for v in values):
                continue                  # never chosen where it was not measured (or refused the shape)
            score = sum(w * v for w, v in zip(weights, values)) / sum(weights)
            if score < best_score:
                best, best_score = name, score
        return best

    @functools.cached_property
    def measured(self) -> dict[tuple[int, int, int], int]:
        """Each measured shape's index into `shapes`."""
        return {shape: i for i, shape in enumerate(self.shapes)}

    def neighbours(self, M: int, N: int, K: int, *, without: tuple[int, int, int] | None = None
                   ) -> list[tuple[int, float]]:
        """(index into `shapes`, squared distance) of the `NEIGHBOURS` measured shapes nearest to (M, N, K) in
        (log2 M, log2 N, log2 K), plus PITCH_DISTANCE^2 where only one of the two has its rows on 128-byte lines,
        nearest first (ties by index); `without`: a shape to leave out."""
        here, lines = features(M, N, K), rows_on_lines(N, K)
        near = sorted((sum((a - b) ** 2 for a, b in zip(here, features(*s)))
                       + (0.0 if rows_on_lines(*s[1:]) == lines else PITCH_DISTANCE ** 2), i)
                      for i, s in enumerate(self.shapes) if s != without)[:NEIGHBOURS]
        return [(i, d) for d, i in near]

    def to_json(self) -> str:
        table = lambda rows: [[None if math.isnan(v) else round(v, 6) for v in row] for row in rows]  # noqa: E731
        return json.dumps({"provenance": self.provenance, "candidates": list(self.candidates),
                           "shapes": [list(s) for s in self.shapes], "scores": table(self.scores),
                           "planned": table(self.planned)}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Rule":
        d = json.loads(text)
        unknown = set(d["candidates"]) - set(configs.HOPPER_CANDIDATES)
        if unknown:
            raise ValueError(f"the rule names configurations that configs.HOPPER_CANDIDATES lacks: {sorted(unknown)}")
        table = lambda rows: tuple(tuple(math.nan if v is None else v for v in row) for row in rows)  # noqa: E731
        return cls(tuple(tuple(s) for s in d["shapes"]), tuple(d["candidates"]), table(d["scores"]),
                   d["provenance"], table(d["planned"]))


def features(M: int, N: int, K: int) -> tuple[float, float, float]:
    """Where the rule places a shape: (log2 M, log2 N, log2 K)."""
    return math.log2(M), math.log2(N), math.log2(K)


def rows_on_lines(N: int, K: int, element_bytes: int = 2) -> bool:
    """Whether every row of A (K elements), B and C (N elements) starts on a 128-byte line (both dtypes: 2 bytes)."""
    return (N * element_bytes) % LINE_BYTES == 0 and (K * element_bytes) % LINE_BYTES == 0


def few_waves(M: int, N: int) -> bool:
    """Whether the default candidate's plan of an M x N output has under FEW_WAVES waves (`waves.Plan.waves`).
    A balanced plan only re-cuts wide tiles into more narrow ones, so it has at least the uniform tile count:
    where that alone reaches FEW_WAVES the answer needs no plan (planning 16384^2 costs ~0.1 s of host time)."""
    from gemm_kernels import waves
    from workbook import gpus
    o = configs.HOPPER_CANDIDATES[configs.HOPPER_FALLBACK]
    slots = waves.slots_for(gpus.current() or gpus.H200, o.cluster_size)     # the planner's own slots
    if math.ceil(M / (o.tile_m * o.cluster_m)) * math.ceil(N / (o.tile_n * o.cluster_n)) >= FEW_WAVES * slots:
        return False
    return _plan_waves(configs.HOPPER_FALLBACK, M, N) < FEW_WAVES


@functools.lru_cache(maxsize=4096)
def _plan_waves(candidate: str, M: int, N: int) -> float:
    from gemm_kernels import hopper_options
    return hopper_options.plan_for(M, N, configs.HOPPER_CANDIDATES[candidate]).waves


@functools.lru_cache(maxsize=16384)
def planned_log_time(candidate: str, M: int, N: int, K: int) -> float:
    """log of the time the wave model predicts for `candidate` at (M, N, K), up to a constant of the candidate
    (its per-slot speed, which the measured scores carry): makespan in items x an item's rows x its width x K.
    A stream-K plan's partial last wave is split evenly over every slot, so it takes items / slots waves.
    NaN where the candidate plans nothing for the shape."""
    from gemm_kernels import hopper_options
    o = configs.HOPPER_CANDIDATES[candidate]
    try:
        plan = hopper_options.plan_for(M, N, o)
    except ValueError:
        return math.nan
    span = plan.waves if o.stream_k else plan.makespan
    return math.log(span * o.tile_m * o.cluster_m * plan.wide * K)


def scores(frame):
    """Per shape and candidate, log of the geometric mean of its timings' ratios to torch.matmul (< 0: faster
    than torch), from sweep rows; rows that failed the reference check count as not measured."""
    ours = frame[(frame.kernel == "ours") & (frame.match_rate >= 1.0) & frame.timing.isin(TIMINGS)]
    table = ours.pivot_table(index=["M", "N", "K"], columns=["variant", "timing"], values="ratio", aggfunc="last")
    import numpy as np
    logs = np.log(table)
    return logs.T.groupby(level="variant").mean().T      # mean of the timings' logs


def fit(frame) -> Rule:
    """The Rule of a sweep's rows (its last run per shape and candidate wins where there are several)."""
    s = scores(frame)
    candidates = tuple(c for c in configs.HOPPER_CANDIDATES if c in s.columns)
    prov_cols = ["gpu", "driver", "torch", "cutlass_dsl", "commit", "date"]
    provenance = {c: sorted(set(map(str, frame[c]))) for c in prov_cols if c in frame}
    provenance["table"] = "gemm_config_sweep"
    shapes = tuple(tuple(int(v) for v in shape) for shape in s.index)
    rows = tuple(tuple(float(s.loc[shape, c]) for c in candidates) for shape in s.index)
    planned = tuple(tuple(planned_log_time(c, *shape) for c in candidates) for shape in shapes)
    return Rule(shapes, candidates, rows, provenance, planned)


@functools.lru_cache(maxsize=1)
def learned() -> Rule | None:
    """The committed rule (`RULE_FILE`), or None where none has been learned yet."""
    return Rule.from_json(RULE_FILE.read_text()) if RULE_FILE.exists() else None


@functools.lru_cache(maxsize=4096)
def choose(M: int, N: int, K: int) -> str:
    """The configuration the learned rule picks for this shape (the fallback where there is no rule)."""
    found = learned()
    return found.choose(M, N, K) if found else configs.HOPPER_FALLBACK


def contenders(M: int, N: int, K: int) -> tuple[str, ...]:
    """What `gemm(a, b, autotune=True)` times at (M, N, K): the rule's choice, the candidate measured best at each
    of the measured shapes nearest to it (`Rule.neighbours`), and the fallback; each once, in that order."""
    found = learned()
    if found is None:
        return (configs.HOPPER_FALLBACK,)
    names = [found.choose(M, N, K)]
    names += [found.choose(*found.shapes[i]) for i, _ in found.neighbours(M, N, K)]
    return tuple(dict.fromkeys([*names, configs.HOPPER_FALLBACK]))


def options_for(M: int, N: int, K: int):
    """The `hopper_options.Options` that `gemm(a, b)` runs for this shape when the caller gives none: the chosen
    candidate as `as_run` runs it."""
    return as_run(configs.HOPPER_CANDIDATES[choose(M, N, K)], M, N, K)


def as_run(options, M: int, N: int, K: int):
    """A candidate as the rule runs it (and autotune times it): `split_k_instead` of it, then in one wave of single
    items without the counter and with the staged epilogue where that applies (`hopper_options.one_wave`)."""
    return hopper_options.one_wave(split_k_instead(options, M, N, K), M, N)


SPLIT_K = "128 split-k cluster2"   # what a stream-K choice becomes where its items split evenly (`split_k_instead`)
SPLIT_K_FILL = 7 / 8               # ... and the pieces keep at least this share of the pair slots busy


def split_k_instead(options, M: int, N: int, K: int, gpu=None):
    """SPLIT_K (128 x 128 tiles in pairs along M, every item cut into the same pieces along K, all starting at once:
    `hopper_options.split_k_slots`) where `options` is a stream-K candidate and those pieces keep at least
    SPLIT_K_FILL of the pair slots busy; else `options` (why the pieces beat stream-K's staggered units:
    `hopper_options.split_k_slots`). On an H100 (probes/gemm_aligned_split_probe.py, 10 interleaved rounds),
    against the rule's `128 stream-k cluster2x2`, GPU time / back to back / synchronised: 1024 x 1024 x 8192 0.930 /
    0.963 / 0.995, x 16384 0.880 / 0.929 / 0.973, x 32768 0.681 / 0.677 / 0.764, 512 x 2048 x 16384 0.847 / 0.859 /
    0.932 (torch.matmul at 0.797-0.884 of the pick there: level with it at three of the four)."""
    if not options.stream_k or options.swap_ab or options.split_k:
        return options
    split = configs.HOPPER_CANDIDATES[SPLIT_K]
    plan = hopper_options.plan_for(M, N, split, gpu)
    items = len(plan.items)
    pieces = hopper_options.split_k_pieces(items, plan.slots, -(-K // hopper_options.TILE_K))
    return split if pieces > 1 and pieces * items >= SPLIT_K_FILL * plan.slots else options


def leave_one_out(rule: Rule, frame):
    """For every measured shape: the candidate the rule picks without that shape's own measurement, and the
    kernel and latency ratios to torch.matmul that this candidate measured there, beside the best candidate's
    (the oracle) and the fixed default's. One row per shape, with its class."""
    import pandas as pd
    kern = _ratios(frame, "kernel")
    lat = _ratios(frame, "latency")
    classes = frame.drop_duplicates(["M", "N", "K"]).set_index(["M", "N", "K"])["class"]
    s = scores(frame)
    rows = []
    for shape in rule.shapes:
        picked = rule.choose(*shape, without=shape)
        oracle = s.loc[shape].idxmin()
        rows.append({"class": classes.get(shape, ""), "M": shape[0], "N": shape[1], "K": shape[2],
                     "rule": picked, "oracle": oracle,
                     "rule_kernel_pct": 100 / kern.loc[shape, picked], "rule_latency_pct": 100 / lat.loc[shape, picked],
                     "oracle_kernel_pct": 100 / kern.loc[shape, oracle],
                     "oracle_latency_pct": 100 / lat.loc[shape, oracle],
                     "default_kernel_pct": 100 / kern.loc[shape, configs.HOPPER_FALLBACK],
                     "default_latency_pct": 100 / lat.loc[shape, configs.HOPPER_FALLBACK]})
    return pd.DataFrame(rows)


def _ratios(frame, timing: str):
    rows = frame[(frame.kernel == "ours") & (frame.timing == timing)]
    return rows.pivot_table(index=["M", "N", "K"], columns="variant", values="ratio", aggfunc="last")


def per_class(long, by=("class",), timings=TIMINGS):
    """Per group of `by` (a class, or a class and a contender): for each timing the median and the minimum % of
    torch.matmul and the shape where it is lowest ("MxNxK"), and the number of shapes. `long`: one row per
    shape, timing and group, with columns M, N, K, timing, pct and those of `by`. One row per group, columns
    (timing, "median" | "min" | "worst") beside `by` and "shapes"; the callers name them."""
    import pandas as pd
    rows = []
    for key, g in long.groupby(list(by), sort=False):
        cells = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        cells["shapes"] = g[["M", "N", "K"]].drop_duplicates().shape[0]
        for timing in timings:
            t = g[g.timing == timing].dropna(subset=["pct"])
            worst = t.loc[t.pct.idxmin()] if len(t) else None
            cells[timing, "median"] = t.pct.median()
            cells[timing, "min"] = t.pct.min()
            cells[timing, "worst"] = f"{worst.M}x{worst.N}x{worst.K}" if worst is not None else ""
        rows.append(cells)
    return pd.DataFrame(rows)


def class_summary(frame, variant: str | None = None):
    """Per class: the median and the minimum % of torch.matmul (100 / ratio) in each timing, of `variant`
    (default: each shape's best candidate in that timing), with the worst shape."""
    ours = frame[frame.kernel == "ours"]
    if variant is not None:
        ours = ours[ours.variant == variant]
    best = ours.groupby(["class", "timing", "M", "N", "K"], sort=False).ratio.min().reset_index()
    summary = per_class(best.assign(pct=100 / best.ratio)).set_index("class")
    return summary.rename(columns={c: f"{c[0]}_{c[1]}_pct" if c[1] != "worst" else f"{c[0]}_worst"
                                   for c in summary.columns if isinstance(c, tuple)})


def latest_run(frame):
    """Each class's rows of each contender from the latest run that timed it there (a run's `date` is its start).
    Every ratio is to torch.matmul timed in the same run, taking turns, so a sweep of some classes (`--classes`)
    or of some candidates (`--candidates`: one added later, or re-timed after a change) refreshes those and keeps
    the others' latest ratios. Absolute times of two candidates may then come from two runs; only ratios compare."""
    if frame.empty:
        return frame
    newest = frame.groupby(["class", "variant"]).date.transform("max")
    return frame[frame.date == newest]


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(prog="python -m gemm_kernels.rule", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fit", action="store_true", help=f"learn the rule from the recorded sweep into {RULE_FILE.name}")
    p.add_argument("--gpu", default="h200", help="the data/measured folder to read (default h200)")
    args = p.parse_args(argv)
    from workbook import records
    frame = latest_run(records.read(args.gpu, "gemm_config_sweep"))
    rule = fit(frame)
    if args.fit:
        RULE_FILE.write_text(rule.to_json() + "\n")
        print(f"wrote {RULE_FILE} ({len(rule.shapes)} shapes x {len(rule.candidates)} candidates)")
    loo = leave_one_out(rule, frame)
    print(loo.groupby("class")[[c for c in loo.columns if c.endswith("_pct")]].median().round(1).to_string())


if __name__ == "__main__":
    main()
