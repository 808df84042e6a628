"""The shape explorer: from a problem shape and a GPU to the roofline, the waves, each variant's latency, a winner.

    ex = Explorer(variants=variants_for, planners={"kmeans": kmeans_plan, "gemm": gemm_plan},
                  checks={"kmeans": kmeans_check, "gemm": gemm_check})
    result = ex.explore("gemm", (4096, 4096, 4096), gpu="b200")
    result.table()          # one row per variant: predicted / recorded / live ms, and where each comes from
    result.winner           # the fastest variant, and `result.winner_basis` says by which number
    figure(result)          # the wave picture and the latency bars
    build_ui(ex)            # the same, behind ipywidgets (notebook 10)

Why the kernels come in as arguments. `workbook` is the shared floor: `kmeans_kernels` and
`gemm_kernels` import it, never the other way round. So the explorer knows the *problems* (their
FLOPs and bytes, which `gpus.roofline_ms` turns into a bound) and the recorded data (`records`,
`pr`), and the notebook hands it what only the kernel packages know, as plain callables:

    variants(kind, gpu) -> [name, ...]                        our variants for that GPU, in tutorial order,
                                                              named as the bench names them in data/measured/
    planners[kind](shape, gpu, variant) -> waves.Plan | None   the tiles of one variant and their waves
                                                              (None: not modelled, e.g. torch)
    checks[kind](shape, gpu) -> None                          raise ValueError if the kernels refuse it
    measure(kind, shape, variant) -> float                    live median ms (only on a GPU)

The prediction is deliberately simple and says so: the roofline at datasheet peaks, with its math
term stretched by the wave tail of the variant's tiling (`compute_ms / plan.efficiency`). It does not
model pipeline depth or the epilogue, so variants that differ only there predict the same time; only a
measurement separates them, and the winner is picked from measurements whenever there are any.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import pandas as pd

from workbook import gpus

KINDS = {"kmeans": ("N", "D", "K"), "gemm": ("M", "N", "K")}
TABLES = {"kmeans": "kmeans_assign", "gemm": "gemm"}      # data/measured/<gpu>/<table>.csv
BYTES_BF16 = 2
MAX_ELEMENTS = 2**31 - 1                                   # int32 indexing in the kernels and in this model


@dataclass(frozen=True)
class Problem:
    """One k-means assignment (N points, D dims, K centroids) or one GEMM (M x K times K x N), bf16."""
    kind: str
    shape: tuple[int, int, int]

    @property
    def dims(self) -> dict[str, int]:
        return dict(zip(KINDS[self.kind], self.shape))

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v:,}" for k, v in self.dims.items())

    @property
    def flops(self) -> float:
        """Tensor-core work: the k-means scores are an N x K x D GEMM; both are 2 ops per multiply-add."""
        a, b, c = self.shape
        return 2.0 * a * b * c

    @property
    def nbytes(self) -> float:
        """The least HBM traffic: every input read once, every output written once.
        k-means: x and c (bf16) in, ids (int32) out, plus the K fp32 centroid norms.
        GEMM: A and B (bf16) in, C (bf16) out."""
        if self.kind == "kmeans":
            n, d, k = self.shape
            return (n * d + k * d) * BYTES_BF16 + n * 4 + k * 4
        m, n, k = self.shape
        return (m * k + k * n + m * n) * BYTES_BF16


def problem(kind: str, shape: Sequence[int]) -> Problem:
    """A validated Problem; ValueError, in words, for anything that is not a shape."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    names = KINDS[kind]
    shape = tuple(shape)
    if len(shape) != 3:
        raise ValueError(f"a {kind} shape is ({', '.join(names)}); got {len(shape)} numbers")
    for name, v in zip(names, shape):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    a, b, c = shape
    sizes = {"kmeans": {"x": a * b, "c": c * b}, "gemm": {"A": a * c, "B": c * b, "C": a * b}}[kind]
    for tensor, elements in sizes.items():
        if elements > MAX_ELEMENTS:
            raise ValueError(f"{tensor} would have {elements:,} elements, more than the {MAX_ELEMENTS:,} that "
                             f"32-bit indexing allows")
    return Problem(kind, shape)


@dataclass
class Row:
    """One variant (or baseline) of the explored problem."""
    variant: str
    predicted_ms: float | None = None     # roofline stretched by the wave tail; None: not modelled
    waves: float | None = None            # work items per slot
    efficiency: float | None = None       # the plan's ideal / makespan
    recorded_ms: float | None = None
    recorded_source: str = ""             # file and provenance of recorded_ms
    live_ms: float | None = None

    @property
    def measured_ms(self) -> float | None:
        return self.live_ms if self.live_ms is not None else self.recorded_ms


@dataclass
class Result:
    problem: Problem
    gpu: gpus.GpuSpec
    roofline: gpus.Roofline
    rows: list[Row]
    plans: dict[str, object] = field(default_factory=dict)   # variant -> waves.Plan
    notes: list[str] = field(default_factory=list)

    @property
    def winner(self) -> str | None:
        """The fastest by live measurement, else by recorded measurement, else by prediction (None on a tie:
        the model cannot separate variants that differ only in what it does not model)."""
        for key in ("live_ms", "recorded_ms", "predicted_ms"):
            timed = [r for r in self.rows if getattr(r, key) is not None]
            if timed:
                best = min(getattr(r, key) for r in timed)
                fastest = [r.variant for r in timed if math.isclose(getattr(r, key), best, rel_tol=1e-9)]
                return fastest[0] if len(fastest) == 1 else None
        return None

    @property
    def winner_basis(self) -> str:
        for key, words in (("live_ms", "measured live on this GPU"), ("recorded_ms", "recorded measurement"),
                           ("predicted_ms", "model only, no measurement of this shape")):
            if any(getattr(r, key) is not None for r in self.rows):
                return words
        return "nothing to compare"

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([{
            "variant": r.variant,
            "predicted ms": r.predicted_ms, "waves": r.waves, "wave efficiency": r.efficiency,
            "recorded ms": r.recorded_ms, "live ms": r.live_ms,
            "% of roofline": (100 * self.roofline.ms / r.measured_ms) if r.measured_ms else None,
            "recorded in": r.recorded_source,
        } for r in self.rows])

    def summary(self) -> str:
        """A few sentences: the bound, the waves, the winner and why."""
        lines = [f"{self.problem.kind} {self.problem.label} on {self.gpu.name} ({self.gpu.sm_count} SMs).",
                 f"Roofline at datasheet peaks: {self.roofline}."]
        plans = {name: p for name, p in self.plans.items() if p is not None}
        for name, p in plans.items():
            lines.append(f"{name}: {len(p.items)} work items on {p.slots} slots = {p.waves:.2f} waves, "
                         f"last wave {p.last_wave_fill:.0%} full (wave efficiency {p.efficiency:.1%}).")
        w = self.winner
        if w:
            lines.append(f"Winner: {w}, by {self.winner_basis}.")
        elif self.winner_basis.startswith("model"):
            lines.append("No single winner: only the model speaks for this shape, and it ties the fastest variants "
                         "(it does not model pipeline depth or the epilogue). A measurement would separate them.")
        else:
            lines.append(f"No single winner: the fastest are tied, by {self.winner_basis}.")
        return "\n".join(lines + self.notes)


def predicted_ms(roof: gpus.Roofline, plan) -> float:
    """The roofline with its math term stretched by the wave tail (see the module doc)."""
    return max(roof.compute_ms / plan.efficiency, roof.memory_ms)


# --------------------------------------------------------------------------------------------- recorded data

PROVENANCE_SHOWN = ("gpu", "driver", "torch", "cutlass_dsl", "commit", "date")


def provenance_text(rows: pd.DataFrame | Mapping) -> str:
    """Where measured rows come from, in one line: each provenance column's distinct values
    ('gpu NVIDIA H200, driver 570.1, ..., date 2026-11-30T01:02:03Z .. 2026-11-30T02:00:00Z')."""
    df = pd.DataFrame([dict(rows)]) if isinstance(rows, Mapping) or isinstance(rows, pd.Series) else rows
    parts = []
    for k in PROVENANCE_SHOWN:
        if k not in df.columns:
            continue
        values = sorted({str(v) for v in df[k] if not pd.isna(v) and str(v) != ""})
        if values:
            shown = f"{values[0]} .. {values[-1]}" if k == "date" and len(values) > 1 else " / ".join(values)
            parts.append(f"{k} {shown}")
    return ", ".join(parts)


def _label(kernel, variant) -> str:
    """'ilp2' for our kernels; 'torch matmul_argmin', 'torch.matmul' or 'flashlib triton' for a baseline."""
    kernel = "" if pd.isna(kernel) else str(kernel)
    variant = "" if pd.isna(variant) else str(variant)
    if kernel in ("", "ours") or variant.startswith(kernel):
        return variant
    return kernel if not variant else f"{kernel} {variant}"


def recorded_ours(p: Problem, gpu: gpus.GpuSpec, root=None) -> dict[str, tuple[float, str]]:
    """variant -> (median ms, 'file: provenance') of our own measurements of exactly this shape on `gpu`;
    the newest row wins when a shape was measured more than once."""
    from workbook import records
    table = TABLES[p.kind]
    df = records.read(gpu.key, table, root=root)
    if df.empty or not set(KINDS[p.kind]) <= set(df.columns):
        return {}
    for name, v in p.dims.items():
        df = df[df[name] == v]
    out = {}
    for _, r in df.iterrows():
        out[_label(r.get("kernel"), r.get("variant"))] = (
            float(r["ms_median"]), f"data/measured/{gpu.key}/{table}.csv: {provenance_text(r)}")
    return out


def recorded_seed(p: Problem, gpu: gpus.GpuSpec) -> dict[str, tuple[float, str]]:
    """The seed PRs' B200 latencies of exactly this shape (their kernels, not ours), labelled as theirs."""
    if gpu.key != "b200":
        return {}
    from workbook import pr
    out = {}
    if p.kind == "kmeans":
        t = pr.nightly_table()
        n, d, k = p.shape
        hit = t[(t.N == n) & (t.D == d) & (t.K == k)]
        for _, r in hit.iterrows():
            src = f"data/pr/kmeans_pr22_nightly.csv (flashlib PR #22 on B200, seed {pr.SEED_KMEANS})"
            out[f"flashlib nightly ({pr.PATH_LABELS[r.nightly_path]})"] = (float(r.nightly_ms), src)
            out[f"flashlib PR #22 ({pr.PATH_LABELS[r.pr_path]})"] = (float(r.pr_ms), src)
    else:
        m, n, k = p.shape
        if m == n == k:
            t = pr.gemm_table()
            src = f"data/pr/gemm_sol_final.csv (cuda-oxide gemm_sol_final on B200, seed {pr.SEED_GEMM})"
            for _, r in t[t["size"] == m].iterrows():
                out["cuda-oxide before (4-stage)"] = (float(r.before_us) / 1e3, src)
                out["cuda-oxide after (7-stage, balanced)"] = (float(r.after_us) / 1e3, src)
                out["cuBLASLt top-8"] = (float(r.cublaslt_top8_us) / 1e3, src)
    return out


# ------------------------------------------------------------------------------------------------ explorer

Planner = Callable[[tuple, gpus.GpuSpec, str], object]
Check = Callable[[tuple, gpus.GpuSpec], None]
Measure = Callable[[str, tuple, str], float]


@dataclass
class Explorer:
    """The explorer, with the kernel-specific pieces injected (see the module doc)."""
    variants: Callable[[str, gpus.GpuSpec], Sequence[str]]   # (kind, gpu) -> our variants, in tutorial order
    planners: Mapping[str, Planner]
    checks: Mapping[str, Check] = field(default_factory=dict)
    measure: Measure | None = None                        # live timing; None without a GPU
    records_root: object = None                           # data/measured/ unless a test says otherwise

    def explore(self, kind: str, shape: Sequence[int], gpu="b200", variants: Sequence[str] | None = None,
                *, live: bool = True) -> Result:
        """Everything the explorer knows about `shape` on `gpu` for the chosen `variants` (default: all of
        ours). Recorded rows of exactly this shape join in, baselines included; with `live` and a GPU of the
        same arch here, each chosen variant is also timed now. ValueError for a shape, GPU or variant that
        does not exist or that the kernels refuse."""
        p = problem(kind, shape)
        spec = gpus.get(gpu)
        if kind in self.checks:
            self.checks[kind](p.shape, spec)
        ours = list(self.variants(kind, spec))
        chosen = ours if variants is None else list(variants)
        unknown = [v for v in chosen if v not in ours]
        if unknown:
            raise ValueError(f"unknown {kind} variant(s) {unknown} for {spec.name}; choose from {ours}")
        roof = gpus.roofline_ms(p.flops, p.nbytes, spec)
        result = Result(p, spec, roof, rows=[])

        for v in chosen:
            plan = self.planners[kind](p.shape, spec, v)
            result.plans[v] = plan
            result.rows.append(Row(v, predicted_ms=predicted_ms(roof, plan) if plan is not None else None,
                                   waves=plan.waves if plan is not None else None,
                                   efficiency=plan.efficiency if plan is not None else None))

        recorded = {**recorded_ours(p, spec, self.records_root), **recorded_seed(p, spec)}
        by_name = {r.variant: r for r in result.rows}
        for name, (ms, src) in recorded.items():
            if name not in by_name and name in ours:
                continue                                   # a variant of ours the user switched off
            row = by_name.get(name) or Row(name)
            if name not in by_name:
                result.rows.append(row)
                by_name[name] = row
            row.recorded_ms, row.recorded_source = ms, src
        if not recorded:
            result.notes.append(f"No measurement of this shape is recorded for {spec.name} "
                                f"(data/measured/{spec.key}/{TABLES[kind]}.csv"
                                + (", data/pr/" if spec.key == "b200" else "") + "): predictions only.")

        here = gpus.current()
        if live and self.measure is not None and here is not None and here.arch == spec.arch:
            for row in result.rows:
                if row.variant in chosen:
                    row.live_ms = float(self.measure(kind, p.shape, row.variant))
            result.notes.append(f"Live: timed just now on this {here.name}.")
        elif here is None:
            result.notes.append("No GPU here: the numbers are the model's and the recorded ones, nothing ran live.")
        elif here.arch != spec.arch:
            result.notes.append(f"This machine has a {here.name}, not a {spec.name}: nothing ran live.")
        return result


# ------------------------------------------------------------------------------------------------- figures

def distinct_plans(result: Result) -> dict[str, object]:
    """The different tilings among the chosen variants, each under the names of the variants that share it
    (4-stage and 7-stage tile the same way; balanced does not)."""
    groups: dict[tuple, tuple[list[str], object]] = {}
    for name, plan in result.plans.items():
        if plan is not None:
            groups.setdefault((plan.items, plan.slots), ([], plan))[0].append(name)
    return {", ".join(names): plan for names, plan in groups.values()}


def figure(result: Result):
    """One wave-occupancy panel per distinct tiling of the chosen variants (the planner's schedule), then
    every variant's latency: predicted as a hatched outline, recorded as a bar, live as a red diamond,
    against the roofline."""
    import matplotlib.pyplot as plt
    from workbook import plots

    plans = distinct_plans(result)
    fig, axes = plt.subplots(1, len(plans) + 1, figsize=(6.0 * len(plans) + 5.5, 4.4), squeeze=False,
                             layout="constrained", gridspec_kw={"width_ratios": [1.15] * len(plans) + [1]})
    for ax, (names, plan) in zip(axes[0], plans.items()):
        plots.wave_occupancy(gantt(plan, result.problem.kind), ax=ax, title=names,
                             slot_label=slot_label(plan, result.gpu),
                             source=f"planner's schedule for {result.gpu.name} (a model, not a measurement)")
        ax.title.set_fontsize(8)
    _latency_panel(result, axes[0][-1])
    fig.suptitle(f"{result.problem.kind} {result.problem.label} on {result.gpu.name}", fontsize=11)
    return fig


def gantt(plan, kind: str = "gemm") -> list[list[tuple[float, float, str]]]:
    """A plan's timeline as `plots.wave_occupancy` draws it: per slot, (start, duration, tile label)."""
    def label(width: int) -> str:
        return f"{plan.tile_m} points x {width:,} centroids" if kind == "kmeans" else f"M{plan.tile_m} x N{width}"
    return [[(r.start, r.end - r.start, label(plan.items[r.item].width)) for r in runs] for runs in plan.timeline]


def slot_label(plan, gpu: gpus.GpuSpec) -> str:
    """What one slot of the plan is: an SM, or a pair of SMs running a 2-CTA cluster."""
    return "CTA pair" if plan.slots == gpu.cluster_pairs and plan.slots != gpu.sm_count else "SM"


def _latency_panel(result: Result, ax) -> None:
    rows = result.rows
    seen = set()

    def once(label: str) -> str | None:       # one legend entry per kind of mark
        if label in seen:
            return None
        seen.add(label)
        return label

    for i, r in enumerate(rows):
        if r.predicted_ms is not None:
            ax.barh(i, r.predicted_ms, height=0.75, fill=False, edgecolor="0.35", hatch="//",
                    label=once("predicted: roofline + wave tail"))
        if r.recorded_ms is not None:
            ax.barh(i, r.recorded_ms, height=0.4, color="tab:blue", label=once("recorded"))
        if r.live_ms is not None:
            ax.plot(r.live_ms, i, "D", color="tab:red", label=once("live"))
        if r.predicted_ms is None and r.measured_ms is None:
            ax.text(0, i, "  not modelled, no measurement", va="center", fontsize=7, color="0.4")
    ax.axvline(result.roofline.ms, color="k", ls="--", lw=1,
               label=f"roofline {result.roofline.ms * 1e3:.1f} us ({result.roofline.bound}-bound)")
    ax.set_yticks(range(len(rows)), [("\u2605 " if r.variant == result.winner else "") + r.variant for r in rows],
                  fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("ms (shorter is faster)")
    ax.set_title(f"latency per variant (\u2605 winner: {result.winner_basis})", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)


# ---------------------------------------------------------------------------------------------------- UI

def build_ui(explorer: Explorer, *, gpus_offered: Sequence[str] = ("b200", "h200"),
             defaults: Mapping[str, Sequence[int]] | None = None):
    """ipywidgets: the problem, its shape, the GPU and the variants in; the summary, the table and the figure
    out. Invalid input shows its ValueError as a message, never a traceback. Returns the top widget."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    defaults = dict(defaults or {"kmeans": (65536, 128, 4096), "gemm": (4096, 4096, 4096)})
    here = gpus.current()
    gpu_options = [(gpus.get(g).name, g) for g in gpus_offered]
    if here is not None:
        gpu_options.insert(0, (f"this GPU: {here.name}", here))

    kind = w.ToggleButtons(options=[("k-means assign", "kmeans"), ("GEMM", "gemm")], value="kmeans")
    dims = [w.BoundedIntText(min=1, max=MAX_ELEMENTS, layout=w.Layout(width="11em")) for _ in range(3)]
    gpu = w.Dropdown(options=gpu_options, description="GPU")
    variants = w.SelectMultiple(rows=5, description="variants", layout=w.Layout(width="34em"))
    go = w.Button(description="explore", button_style="primary")
    out = w.Output()

    def set_kind(*_):
        for box, name, v in zip(dims, KINDS[kind.value], defaults[kind.value]):
            box.description, box.value = name, v
        set_variants()

    def set_variants(*_):
        options = list(explorer.variants(kind.value, gpus.get(gpu.value)))
        variants.options, variants.value = options, tuple(options)

    def run(*_):
        out.clear_output()
        with out:
            try:
                result = explorer.explore(kind.value, [b.value for b in dims], gpu.value, list(variants.value))
            except ValueError as err:
                print(f"Cannot explore this: {err}")
                return
            print(result.summary())
            display(result.table())
            fig = figure(result)
            display(fig)
            plt.close(fig)

    kind.observe(set_kind, names="value")
    gpu.observe(set_variants, names="value")
    go.on_click(run)
    set_kind()
    return w.VBox([kind, w.HBox(dims), w.HBox([gpu, variants, go]), out])
