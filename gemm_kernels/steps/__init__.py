"""The GEMM walkthrough's step kernels, one complete file per step, and the call that tries one.

    from gemm_kernels import steps
    steps.try_step(2)                                  # compile, check, time against step 1 and torch, SASS delta
    path = workbook.stepper.copy_for_editing(steps.load(2), "my_steps")   # edit it, then:
    steps.try_step(path)                               # your copy, against the package's step 1

Each step file exposes `compile(M, N, K, ..., arch="sm_90a") -> workbook.sass.Artifacts` (no GPU needed) and
`gemm(a, b, out=None)` (an H100/H200):
  1. step1_four_stages           a 4-stage TMA -> WGMMA ring, staged epilogue (stmatrix + TMA store)
  2. step2_register_epilogue     the epilogue stores 16 bytes per lane straight from registers
  3. step3_more_stages           the freed shared memory as stages: 7 on a 128 x 128 tile
  4. step4_persistent_wave_tail  a persistent grid whose last wave is re-cut into narrower tiles
"""
from __future__ import annotations

import importlib
import math
import types
from dataclasses import dataclass, field
from pathlib import Path

STEPS = ("step1_four_stages", "step2_register_epilogue", "step3_more_stages", "step4_persistent_wave_tail")
CHECK_SHAPES = ((1000, 1032, 776), (77, 8, 8), (129, 264, 72))    # tails in M, N and K; one tile; a sliver
TIMING_SHAPES = ((4096, 4096, 4096),)
COMPILE_SHAPE = (4096, 4096, 4096)


def load(step) -> types.ModuleType:
    """A step as a module: 1..4, a name of STEPS, a module, or the path of a (learner's edited) step file."""
    if isinstance(step, types.ModuleType):
        return step
    if isinstance(step, int) and not isinstance(step, bool):
        if not 1 <= step <= len(STEPS):
            raise ValueError(f"steps are numbered 1..{len(STEPS)}, got {step}")
        step = STEPS[step - 1]
    if isinstance(step, str) and step in STEPS:
        return importlib.import_module(f"{__name__}.{step}")
    if isinstance(step, (str, Path)):
        from workbook import stepper
        return stepper.load(step)
    raise ValueError(f"a step is 1..{len(STEPS)}, one of {STEPS}, a module or a path; got {step!r}")


def name_of(module: types.ModuleType) -> str:
    """The step's file name without .py (a learner's copy keeps the name of the step it copies)."""
    return Path(module.__file__).stem


def previous_step(step) -> types.ModuleType | None:
    """The package's step before `step` (by file name), or None for step 1 or an unknown file."""
    name = name_of(load(step))
    return load(STEPS[STEPS.index(name) - 1]) if name in STEPS[1:] else None


def check(module, shapes=CHECK_SHAPES, **options):
    """Run a step on an H100/H200 against fp32 torch: small integers (exact: every partial sum is an integer
    below 2^24) into an output poisoned with NaN, at shapes with tails, in bf16 and fp16; random bf16 inputs
    within the bf16 band (||c - ref|| / ||ref|| < 1e-2). A DataFrame, one row per case."""
    import pandas as pd
    import torch
    gemm = load(module).gemm
    rows = []
    for (M, N, K), dtype in [(s, torch.bfloat16) for s in shapes] + [(shapes[0], torch.float16)]:
        g = torch.Generator(device="cuda").manual_seed(int(torch.randint(0, 2**31, ())))
        a = torch.randint(-3, 4, (M, K), device="cuda", generator=g).to(dtype)
        b = torch.randint(-3, 4, (K, N), device="cuda", generator=g).to(dtype)
        out = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
        c = gemm(a, b, out=out, **options)
        wrong = int((c != (a.float() @ b.float()).to(dtype)).sum())   # NaN != anything: unwritten counts
        rows.append(dict(case=f"small integers, {str(dtype)[6:]}, exact", shape=f"{M}x{N}x{K}", passed=wrong == 0,
                         detail=f"{wrong} of {M * N} elements differ"))
    M, N, K = shapes[0]
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    rel = ((gemm(a, b, **options).float() - ref).norm() / ref.norm()).item()
    rows.append(dict(case="random bf16, within 1e-2", shape=f"{M}x{N}x{K}", passed=rel < 1e-2,
                     detail=f"relative error {rel:.2e}"))
    return pd.DataFrame(rows)


@dataclass(repr=False)
class Trial:
    """What `try_step` found; renders as a report in a notebook and as text."""
    name: str
    previous: str | None
    facts: object                    # DataFrame: evidence.facts of the previous step and of this one
    sass_delta: object               # DataFrame: opcodes whose count changed (workbook.stepper.sass_delta)
    checks: object = None            # DataFrame of `check`, or None without a Hopper GPU
    timing: object = None            # DataFrame of gemm_steps rows (live or recorded), or None
    where: str = ""                  # where the numbers come from
    notes: list = field(default_factory=list)

    @property
    def passed(self) -> bool | None:
        return None if self.checks is None else bool(self.checks.passed.all())

    def _sections(self):
        title = f"{self.name}" + (f" against {self.previous}" if self.previous else "")
        yield "title", title
        yield "compiled for sm_90a (no GPU needed)", self.facts
        if self.sass_delta is not None:
            yield "SASS: opcodes whose count changed", self.sass_delta
        yield "check against fp32 torch", self.checks if self.checks is not None else \
            "not run: no H100/H200 here (the kernel was compiled and inspected only)"
        yield f"timing ({self.where})", self.timing if self.timing is not None else "nothing to show"
        for note in self.notes:
            yield "note", note

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        out = []
        for head, body in self._sections():
            out.append(f"== {body}" if head == "title" else f"-- {head}\n{body if isinstance(body, str) else body.to_string()}")
        return "\n".join(out)

    def _repr_html_(self) -> str:
        import html
        out = []
        for head, body in self._sections():
            if head == "title":
                out.append(f"<h4>{html.escape(body)}</h4>")
                continue
            out.append(f"<b>{html.escape(head)}</b>")
            out.append(f"<p>{html.escape(body)}</p>" if isinstance(body, str) else body.to_html(float_format=_sig3))
        return "\n".join(out)


def _sig3(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) and math.isfinite(v) else str(v)


def timing_table(frame):
    """gemm_steps rows as a reader's table: per shape, contender and timing, ms, % of torch.matmul with its 95 %
    interval, and the ratio to the previous step (time / previous time: < 1 is faster) with its interval."""
    import pandas as pd
    rows = []
    for _, r in frame.iterrows():
        row = {"shape": f"{r.M}x{r.N}x{r.K}", "contender": r.variant, "timing": r.timing, "ms": f"{r.ms_median:.3g}",
               "% of torch": f"{100 / r.ratio_torch:.3g}",
               "95% CI": f"[{100 / r.ratio_torch_hi:.3g}, {100 / r.ratio_torch_lo:.3g}]",
               "vs previous": "", "vs previous 95% CI": "", "verdict": ""}
        if isinstance(r.previous, str) and r.previous:
            row.update({"vs previous": f"{r.ratio_previous:.3g}",
                        "vs previous 95% CI": f"[{r.ratio_previous_lo:.3g}, {r.ratio_previous_hi:.3g}]",
                        "verdict": r.verdict_previous})
        rows.append(row)
    return pd.DataFrame(rows)


def recorded(names, shapes=None, gpu: str = "h200", root=None):
    """The rows of the most recent recorded benchmark run (`workbook.records.last_run`) that measured the contenders
    `names` (variants) and torch.matmul, at `shapes` (default: every shape that run measured). `root`: another
    data/measured folder (tests)."""
    from workbook import records
    df = records.read(gpu, "gemm_steps", root=root)
    if df.empty:
        return df
    wanted = set(names) | {"torch.matmul"}
    needed = {(k, v) for k, v in zip(df.kernel, df.variant) if v in wanted}
    if {v for _, v in needed} != wanted:
        return df.iloc[0:0]
    run = records.last_run(df, needed)
    rows = run[run.variant.isin(wanted)]
    if shapes is not None:
        rows = rows[[tuple(s) in {tuple(x) for x in shapes} for s in zip(rows.M, rows.N, rows.K)]]
    return rows


def recorded_report(names, shapes=None, root=None):
    """(table, note) for a notebook: `timing_table` of the latest recorded run of these steps and torch.matmul
    (None when nothing is recorded yet), and a line saying where the rows come from, or that they are missing."""
    from workbook import explore
    source = "data/measured/h200/gemm_steps.csv"
    rows = recorded(names, shapes, root=root)
    if rows.empty:
        return None, (f"No rows for {', '.join(names)} and torch.matmul in {source} yet: on an H200, "
                      "`python -m gemm_kernels.steps.bench` records them; re-run this notebook afterwards. "
                      "No number is shown until it is measured.")
    return timing_table(rows), f"Source: {source} ({explore.provenance_text(rows)})"


def try_step(step, previous=None, *, shapes=TIMING_SHAPES, check_shapes=CHECK_SHAPES, rounds: int = 10,
             options: dict | None = None) -> Trial:
    """Compile a step (a number, name, module or edited file), compare its SASS with the previous step's, and
    on an H100/H200 check it against fp32 torch (tails, poisoned output, fp16) and time it against the
    previous step and torch.matmul (`workbook.timing.compare`: both timings, 95 % intervals). Without one,
    it says so and shows the recorded rows of data/measured/h200/gemm_steps.csv. `options` go to the step's
    `compile` and `gemm` (e.g. dict(tile_n=256))."""
    from gemm_kernels.steps import evidence
    from workbook import gpus, stepper
    module = load(step)
    before = load(previous) if previous is not None else previous_step(module)
    name, prev_name = name_of(module), (name_of(before) if before is not None else None)
    options = dict(options or {})
    art = module.compile(*COMPILE_SHAPE, **options)
    builds = {name: art}
    delta = None
    if before is not None:
        prev_art = before.compile(*COMPILE_SHAPE)
        builds = {f"{prev_name} (previous)": prev_art, name: art}
        delta = stepper.sass_delta(prev_art.sass, art.sass, changed_only=True)
    trial = Trial(name, prev_name, evidence.table(builds), delta)
    edited = module.__name__ != f"{__name__}.{name}"
    if edited:
        trial.notes.append(f"{name} was loaded from {module.__file__}")
    spec = gpus.current()
    if spec is None or spec.arch != "sm_90a":
        trial.where = "no H100/H200 here, so not run: the rows recorded on the H200"
        rows = recorded([n for n in (prev_name, name) if n], shapes)
        trial.timing = timing_table(rows) if not rows.empty else None
        if rows.empty:
            trial.notes.append("data/measured/h200/gemm_steps.csv holds no rows for these steps yet: "
                               "`python -m gemm_kernels.steps.bench` on an H200 records them")
        elif edited:
            trial.notes.append(f"the recorded rows are the package's {name}, not your copy's")
        return trial
    trial.checks = check(module, check_shapes, **options)
    import pandas as pd
    import torch

    from gemm_kernels.steps import bench
    fns = {("ours", name): (lambda a, b: module.gemm(a, b, **options))}
    if before is not None:
        fns = {("ours", prev_name): before.gemm, **fns}
    fns[bench.TORCH] = torch.matmul
    frames = [bench.measure(M, N, K, fns, rounds=rounds) for M, N, K in shapes]
    trial.timing = timing_table(pd.concat(frames))
    trial.where = f"live on {spec.name}, {rounds} interleaved rounds"
    return trial
