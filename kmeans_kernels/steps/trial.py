"""`try_step`: compile a step (or your edited copy), check it, time it against the step before, show the SASS change.

    r = try_step("my_steps/step2_ilp2.py")      # your copy, against the package's step2 it came from
    r = try_step(step3_norm_broadcast)           # a package step, against step 2
    r                                            # renders in a notebook; print(r) as text

On an H100/H200 the check runs every adversarial case of `kmeans_kernels.steps.cases` against the reference
(bit for bit, outputs poisoned first) and the timing is `workbook.timing.compare` (interleaved rounds, kernel
time and latency, ratios with 95 % intervals). Elsewhere the compile and the SASS still run here, the check
says it needs the GPU, and the timing shows the rows recorded on the H200, with their file.
"""
from __future__ import annotations

import hashlib
import html
import types
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from kmeans_kernels import sass_checks
from kmeans_kernels.steps import STEPS, anatomy, cases
from workbook import records, sass, stepper, timing

DEFAULT_SHAPES = ((65536, 128, 4096), (262144, 128, 4096))
TABLE = "kmeans_steps"
TORCH = "torch"


def on_hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def step_name(module: types.ModuleType) -> str:
    """A step's name: the stem of its file (an edited copy keeps the name of the step it was copied from)."""
    return Path(module.__file__).stem


def package_step(name: str) -> types.ModuleType:
    return stepper.load(f"kmeans_kernels.steps.{name}")


def previous_of(module: types.ModuleType) -> types.ModuleType | None:
    """The module a step is compared with: for an edited copy, the package step it came from; for a package
    step, the one before it; None for step 1 (compared with torch)."""
    name = step_name(module)
    if name not in STEPS:
        return None
    original = package_step(name)
    if Path(original.__file__).resolve() != Path(module.__file__).resolve():
        return original
    i = STEPS.index(name)
    return package_step(STEPS[i - 1]) if i else None


_compiled: dict[tuple, object] = {}


def compiled(module, D: int = 128, **options):
    """`module.compile(D, **options)`, once per source: a notebook compiles each step only once, and an edited
    copy is compiled anew (the key holds a hash of its file)."""
    source = hashlib.sha1(Path(module.__file__).read_bytes()).hexdigest()
    key = (source, D, tuple(sorted(options.items())))     # an unedited copy is the step it was copied from
    if key not in _compiled:
        _compiled[key] = module.compile(D, **options)
    return _compiled[key]


def _torch_assign(x, c, c_sq=None, out=None):
    """What a user writes: the product in the inputs' dtype, then an argmin over fp32 scores."""
    ids = (0.5 * c_sq - (x @ c.t()).float()).argmin(1).to(torch.int32)
    return ids if out is None else out.copy_(ids)


@dataclass
class Checked:
    case: str
    shape: tuple[int, int, int]
    passed: bool
    detail: str
    what: str = ""


@dataclass
class TryResult:
    name: str
    previous: str
    compiled: dict                               # {name: workbook.sass.Artifacts} of the step and its previous
    sass_delta: pd.DataFrame
    anatomy: pd.DataFrame
    checks: list[Checked] = field(default_factory=list)
    check_note: str = ""
    comparisons: dict = field(default_factory=dict)     # {(N, D, K): workbook.timing.Comparison}
    recorded: pd.DataFrame | None = None
    timing_note: str = ""

    @property
    def passed(self) -> bool | None:
        """True when every case matched, False when one did not, None when nothing ran (no GPU)."""
        return all(c.passed for c in self.checks) if self.checks else None

    def failures(self) -> list[Checked]:
        return [c for c in self.checks if not c.passed]

    def timing_table(self) -> pd.DataFrame:
        """One row per shape and timing: both medians and the ratio with its interval (3 significant digits)."""
        rows = []
        for (N, D, K), cmp in self.comparisons.items():
            for t in cmp.per_round:
                r = cmp.ratio(self.name, t)
                rows.append({"N": N, "D": D, "K": K, "timing": t, f"{self.previous} ms": cmp.timing(self.previous, t).ms_median,
                             f"{self.name} ms": cmp.timing(self.name, t).ms_median, "ratio": r.value,
                             "95% interval": f"[{r.lo:.3g}, {r.hi:.3g}]", "verdict": r.verdict})
        return pd.DataFrame(rows)

    def _sections(self):
        regs = {n: max(sass.registers(a.cubin).values()) for n, a in self.compiled.items()}
        yield "Compiled for sm_90a", pd.DataFrame({"registers per thread": regs}).T
        if self.checks:
            yield "Check against kmeans_kernels.reference", pd.DataFrame(
                [{"case": c.case, "N x D x K": " x ".join(map(str, c.shape)), "result": "ok" if c.passed else "WRONG",
                  "detail": c.detail or c.what} for c in self.checks])
        else:
            yield "Check against kmeans_kernels.reference", self.check_note
        if self.comparisons:
            yield f"Timing: {self.name} / {self.previous} (< 1: faster)", self.timing_table()
        elif self.recorded is not None and not self.recorded.empty:
            yield f"Timing: {self.timing_note}", self.recorded
        else:
            yield "Timing", self.timing_note
        yield f"SASS of one tile's argmin (the scan block): opcodes that changed from {self.previous}", self.sass_delta
        yield "Per tile and thread (kmeans_kernels.steps.anatomy)", self.anatomy

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        parts = [f"try_step: {self.name} (vs {self.previous})"]
        for title, body in self._sections():
            text = body if isinstance(body, str) else body.to_string(float_format=lambda v: f"{v:.3g}")
            parts.append(f"\n== {title}\n{text}")
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        out = [f"<h4>try_step: <code>{html.escape(self.name)}</code> vs <code>{html.escape(self.previous)}</code></h4>"]
        for title, body in self._sections():
            out.append(f"<b>{html.escape(title)}</b>")
            out.append(f"<p>{html.escape(body)}</p>" if isinstance(body, str) else
                       body.to_html(float_format=lambda v: f"{v:.3g}", border=0))
        return "\n".join(out)


def check_step(module, *, options: dict | None = None, seed: int | None = None, D: int = 128) -> list[Checked]:
    """Every adversarial case through `module.assign`, against the reference (needs an H100/H200)."""
    results = []
    for case in cases.adversarial("cuda", seed=seed, D=D):
        try:
            got = cases.run(module.assign, case, **(options or {}))
            detail = cases.mismatches(got, case.expect)
        except Exception as e:  # noqa: BLE001 - a learner's edit may fail in any way; report it as the result
            detail = f"{type(e).__name__}: {e}"
        results.append(Checked(case.name, case.shape, not detail, detail, case.what))
    return results


def recorded_rows(name: str) -> tuple[pd.DataFrame, str]:
    """The H200 rows of kmeans_steps.csv for one step (each against the step before it), latest run."""
    source = records.path("h200", TABLE)
    df = records.read("h200", TABLE)
    if df.empty or "timing" not in df.columns:
        return pd.DataFrame(), (f"no GPU here, and no recorded rows in {source.name} yet "
                                "(python -m kmeans_kernels.steps.bench on an H200 records them)")
    run = records.last_run(df, [("ours", name)])
    if run.empty:
        return pd.DataFrame(), f"no GPU here, and no run in {source.name} measured {name}"
    rows = run[(run.kernel == "ours") & (run.variant == name)]
    cols = ["N", "D", "K", "timing", "ms_median", "vs", "ratio", "ratio_lo", "ratio_hi", "verdict"]
    first = run.iloc[0]
    shown = source.relative_to(records.DATA.parent) if source.is_relative_to(records.DATA.parent) else source
    note = (f"recorded on the H200 ({shown}, commit {first.commit}, "
            f"{first.date}); no GPU here")
    return rows[cols].reset_index(drop=True), note


def try_step(step, previous=None, *, shapes=DEFAULT_SHAPES, check: bool = True, time: bool = True,
             D: int = 128, options: dict | None = None, rounds: int = 20, calls: int = 10,
             seed: int | None = None) -> TryResult:
    """Compile `step` (a module, or the path of an edited copy: `workbook.stepper.load`) and `previous` (default:
    see `previous_of`; step 1 is compared with torch) for sm_90a at `D`; check it on the adversarial cases and
    time it over `shapes` on an H100/H200; report the SASS change. `options` go to the step's `assign`."""
    module = stepper.load(step)
    prev = stepper.load(previous) if previous is not None else previous_of(module)
    name = step_name(module)
    prev_name = TORCH if prev is None else step_name(prev)
    if prev is not None and prev_name == name:
        prev_name = f"{name} (package)"
    arts = {name: compiled(module, D)}
    if prev is not None:
        arts[prev_name] = compiled(prev, D)
    base = arts.get(prev_name, arts[name])
    # the delta of one tile's argmin (the scan block): what a step changes, without the compiler's other choices
    block = {n: sass_checks.scan_block(a.sass, after=None) for n, a in ((prev_name, base), (name, arts[name]))}
    result = TryResult(name=name, previous=prev_name, compiled=arts,
                       sass_delta=stepper.sass_delta(block[prev_name], block[name], changed_only=True),
                       anatomy=anatomy.table({n: arts[n] for n in reversed(list(arts))}))
    gpu = on_hopper()
    if check:
        if gpu:
            result.checks = check_step(module, options=options, seed=seed, D=D)
        else:
            result.check_note = ("needs an H100/H200 to run the kernel: here it was compiled and its SASS read, "
                                 "not run (on the GPU: the same call checks every adversarial case)")
    if time:
        if gpu:
            from kmeans_kernels import bench
            fns = {prev_name: _torch_assign if prev is None else prev.assign,
                   name: lambda x, c, c_sq: module.assign(x, c, c_sq, **(options or {}))}
            for N, D_, K in shapes:
                sets = bench.input_sets(N, D_, K)
                result.comparisons[(N, D_, K)] = timing.compare(fns, sets, baseline=prev_name, rounds=rounds,
                                                                calls=calls)
                del sets
        else:
            result.recorded, result.timing_note = recorded_rows(name)
    return result
