"""Time every GEMM step beside the production default and torch.matmul (cuBLAS) on this Hopper GPU.

    python -m gemm_kernels.steps.bench              # 4096^3, 8192^3, 16384^3 and 2560x7168x8192, 20 rounds
    python -m gemm_kernels.steps.bench --quick      # 4096^3 and 2560x7168x8192, 5 rounds
    python -m gemm_kernels.steps.bench --shapes 4096x4096x4096 --rounds 10 --no-record

Method (DESIGN.md, `workbook.timing.compare`): three seeded input sets rotated over all calls; every contender
warmed up, then interleaved rounds in a rotating order, each round giving every contender 10 synchronised,
CUDA-event-timed calls (the latency a user sees, the seeds' method) and 10 calls back to back (the kernel's
own time). Ratios are formed round by round (the GPU's clock drift cancels) and summarised by their median
with a bootstrap 95 % interval. Before timing, each input set is checked against an fp32 reference
(`match_rate`: the fraction of sets with ||c - ref|| / ||ref|| < 1e-2).

Rows go, shape by shape as measured, to data/measured/<gpu>/gemm_steps.csv (`workbook.records`): one per
contender and timing ("latency", "kernel"), with the ratio of its time to the previous step's and to
torch.matmul's (< 1: faster) and their intervals. The poor-wave shape is the one of `gemm_kernels.bench`'s
`poor_wave_shapes` where the planner predicts the most from balancing 128 x 256 tiles on the H200 (~18 %).
GPU time: about 2 minutes for the full run (compiles included), 40 s with --quick.
"""
from __future__ import annotations

import argparse
import math

import torch

from gemm_kernels import steps as steps_pkg
from gemm_kernels.bench import shape_arg

SQUARES = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384))
POOR_WAVE = (2560, 7168, 8192)
SHAPES = SQUARES + (POOR_WAVE,)
QUICK_SHAPES = ((4096, 4096, 4096), POOR_WAVE)
TORCH = ("torch", "torch.matmul")
PRODUCTION = ("ours", "production default")
REL_TOL = 1e-2
TABLE = "gemm_steps"


def contenders(names=steps_pkg.STEPS, production: bool = True) -> dict:
    """{(kernel, variant): fn(a, b)} in story order: the steps, the production default, torch.matmul."""
    fns = {("ours", name): steps_pkg.load(name).gemm for name in names}
    if production:
        import gemm_kernels
        fns[PRODUCTION] = gemm_kernels.gemm
    fns[TORCH] = torch.matmul
    return fns


def previous_of(names) -> dict:
    """Each contender's predecessor in the story: step n-1 for step n, the last step for the production
    default; the first step and torch.matmul have none."""
    ours = [n for n in names if n != TORCH]
    return {b: a for a, b in zip(ours, ours[1:])}


def input_sets(M: int, N: int, K: int, n: int = 3, dtype=torch.bfloat16):
    sets = []
    for seed in range(n):
        g = torch.Generator(device="cuda").manual_seed(1234 + seed)
        sets.append((torch.randn(M, K, device="cuda", dtype=dtype, generator=g),
                     torch.randn(K, N, device="cuda", dtype=dtype, generator=g)))
    return sets


def accuracy(fn, sets, refs) -> tuple[float, float]:
    """(match rate, largest relative error) of fn over the input sets against their fp32 references."""
    errors = [((fn(a, b).float() - ref).norm() / ref.norm()).item() for (a, b), ref in zip(sets, refs)]
    errors = [e if math.isfinite(e) else math.inf for e in errors]
    return sum(e < REL_TOL for e in errors) / len(errors), max(errors)


def measure(M: int, N: int, K: int, fns: dict, *, rounds: int = 20, calls: int = 10, previous: dict | None = None,
            baseline=TORCH, sets=None):
    """One shape: the accuracy check, then `workbook.timing.compare`; a DataFrame of rows for gemm_steps.
    `sets`: the input sets (default `input_sets`, on the GPU; CPU tensors only test this harness)."""
    import pandas as pd

    from workbook import timing
    torch.backends.cuda.matmul.allow_tf32 = False           # the fp32 reference stays fp32
    previous = previous_of(list(fns)) if previous is None else previous
    sets = input_sets(M, N, K) if sets is None else sets
    refs = [a.float() @ b.float() for a, b in sets]
    checked = {name: accuracy(fn, sets, refs) for name, fn in fns.items()}
    del refs
    cmp = timing.compare(fns, sets, baseline=baseline, rounds=rounds, calls=calls)
    rows = []
    for name in fns:
        for which in cmp.per_round:                         # "latency", then "kernel"
            t = cmp.timing(name, which)
            vs_torch = cmp.ratio(name, which)
            prev = previous.get(name)
            vs_prev = cmp.ratio(name, which, against=prev) if prev is not None else None
            nan = float("nan")
            rows.append(dict(
                kernel=name[0], variant=name[1], timing=which, M=M, N=N, K=K,
                ms_median=t.ms_median, ms_min=t.ms_min, ms_max=t.ms_max, tflops=t.tflops(2.0 * M * N * K),
                match_rate=checked[name][0], max_rel_err=checked[name][1],
                previous=prev[1] if prev else "", ratio_previous=vs_prev.value if vs_prev else nan,
                ratio_previous_lo=vs_prev.lo if vs_prev else nan, ratio_previous_hi=vs_prev.hi if vs_prev else nan,
                verdict_previous=vs_prev.verdict if vs_prev else "",
                ratio_torch=vs_torch.value, ratio_torch_lo=vs_torch.lo, ratio_torch_hi=vs_torch.hi,
                verdict_torch=vs_torch.verdict, rounds=cmp.rounds, calls=cmp.calls))
    del sets
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def summary(frame, timing: str = "kernel") -> str:
    """A short text table: per shape and contender, ms, % of torch.matmul and the ratio to the previous step."""
    lines = [f"{'shape':>20}  {'contender':<28} {'ms':>9}  {'% of torch [95% CI]':>22}  vs previous [95% CI]"]
    for _, r in frame[frame.timing == timing].iterrows():
        pct = f"{100 / r.ratio_torch:5.1f} [{100 / r.ratio_torch_hi:5.1f}, {100 / r.ratio_torch_lo:5.1f}]"
        prev = ("" if not r.previous else
                f"{r.ratio_previous:.3f} [{r.ratio_previous_lo:.3f}, {r.ratio_previous_hi:.3f}] {r.verdict_previous}")
        lines.append(f"{r.M:>6}x{r.N:>6}x{r.K:>6}  {r.variant:<28} {r.ms_median:9.4f}  {pct:>22}  {prev}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=shape_arg, nargs="+", help="MxNxK shapes (default: the four of the story)")
    p.add_argument("--quick", action="store_true", help="4096^3 and the poor-wave shape, 5 rounds")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds per shape (default 20; 5 quick)")
    p.add_argument("--no-record", action="store_true", help="print only; do not append to data/measured")
    args = p.parse_args(argv)
    from workbook import gpus, records
    spec = gpus.current()
    if spec is None or spec.arch != "sm_90a":
        raise SystemExit(f"the GEMM steps run on an H100/H200; this machine has {gpus.describe()}. "
                         f"Recorded numbers: data/measured/h200/{TABLE}.csv")
    shapes = args.shapes or (QUICK_SHAPES if args.quick else SHAPES)
    rounds = args.rounds or (5 if args.quick else 20)
    fns = contenders()
    frames = []
    for M, N, K in shapes:
        frame = measure(M, N, K, fns, rounds=rounds)
        if not args.no_record:
            records.append(spec.key, TABLE, frame)          # shape by shape, as measured
        print(summary(frame), flush=True)
        frames.append(frame)
    import pandas as pd
    print("\nkernel time (back to back), % of torch.matmul with 95 % intervals:")
    print(summary(pd.concat(frames)))


if __name__ == "__main__":
    main()
