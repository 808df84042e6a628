"""Why the register epilogue and the deeper ring do not move the H200 number: Nsight Compute metrics of every
GEMM step, the production default and torch.matmul (cuBLAS) at one shape.

    python tools/ncu_gemm_steps.py                       # 8192^3 -> data/measured/h200/gemm_steps_ncu.txt
    python tools/ncu_gemm_steps.py --shape 4096x4096x4096 --out /tmp/ncu.txt
    python tools/ncu_gemm_steps.py --shape 1024x1024x8192 --candidates "64 uniform cluster2n" --out /tmp/ncu.txt
                                     # named configs.HOPPER_CANDIDATES instead of the steps, beside torch.matmul

It runs itself under `ncu --clock-control none --profile-from-start off --metrics ...` (the GPU keeps its own
clocks, as when timed), with the inputs made and every kernel compiled and warmed up before the profiler
window opens, so ncu sees one kernel per contender, in the order the child prints `profiled: ...` lines;
`workbook.ncu.read` pairs them. Metrics (the ones this ncu does not know are dropped, and the report says so):
  * tensor pipe: the fraction of elapsed cycles the HMMA pipe was busy; if step 2 or 3 left it as busy as
    step 1, there was no memory stall for them to remove;
  * warp stalls, % of a warp's active cycles, by reason: `barrier` (named barriers: step 1's epilogue),
    `long_scoreboard` (waiting on global/local memory), `wait` and `math_pipe_throttle` (the WGMMA waits),
    `lg_throttle` (the global-store queue: steps 2-4's STG), `mio_throttle` / `short_scoreboard` (shared memory);
  * shared memory: LSU wavefronts to shared memory (stmatrix, ld/st.shared; WGMMA's and TMA's own traffic does
    not go through the LSU) and bank conflicts; L1/shared throughput as % of peak;
  * time, SM clock and DRAM bytes, so each row can be set beside gemm_steps.csv.
About a minute on an H200 (compiles included).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / "data" / "measured" / "h200" / "gemm_steps_ncu.txt"
METRICS = (
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg.per_second",
    "dram__bytes_read.sum",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_wait_per_warp_active.pct",
    "smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_sleeping_per_warp_active.pct",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_sectors.sum",
    "lts__t_requests.sum",
    "lts__t_sectors_op_read.sum",
    "lts__t_sectors_op_write.sum",
    "lts__t_sectors_srcunit_ltcfabric.sum",
)


def base_name(metric: str) -> str:
    """The base of a metric name, as `ncu --query-metrics` lists it: everything before the first '.'."""
    return metric.split(".", 1)[0]


def known_metrics(ncu: str, metrics=METRICS) -> tuple[list[str], list[str]]:
    """(metrics this ncu knows, metrics it does not) by the base names `ncu --query-metrics` lists for the GPU
    here. If the query itself fails, every metric is tried."""
    run = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True)
    if run.returncode != 0 or not run.stdout.strip():
        return list(metrics), []
    listed = {line.split()[0] for line in run.stdout.splitlines() if line.strip() and "__" in line.split()[0]}
    return [m for m in metrics if base_name(m) in listed], [m for m in metrics if base_name(m) not in listed]


def contenders(M: int, N: int, K: int, candidates=()):
    """(name, call) of each step and the production default, or of each named candidate; torch.matmul last."""
    import torch

    import gemm_kernels
    from gemm_kernels import configs, steps
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    if candidates:
        runs = [(name, lambda o=configs.HOPPER_CANDIDATES[name]: gemm_kernels.gemm(a, b, o)) for name in candidates]
    else:
        runs = [(name, lambda m=steps.load(name): m.gemm(a, b)) for name in steps.STEPS]
        runs.append(("production default", lambda: gemm_kernels.gemm(a, b)))
    return runs + [("torch.matmul", lambda: torch.matmul(a, b))]


def profile(M: int, N: int, K: int, candidates=()) -> None:
    """The child: compile and warm up everything, then one call of each contender inside the profiler window."""
    from workbook import ncu
    ncu.profile_each([(f"{M}x{N}x{K} {name}", fn) for name, fn in contenders(M, N, K, candidates)])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from gemm_kernels.bench import shape_arg
    p.add_argument("--shape", type=shape_arg, default=(8192, 8192, 8192))
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--ncu", default="ncu")
    p.add_argument("--candidates", nargs="+", default=[], metavar="NAME",
                   help="names of gemm_kernels.configs.HOPPER_CANDIDATES to profile instead of the steps")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)    # the profiled child
    args = p.parse_args(argv)
    if args.inside:
        return profile(*args.shape, candidates=args.candidates)
    metrics, dropped = known_metrics(args.ncu)
    from workbook import ncu
    args.out.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# {args.ncu} --clock-control none --profile-from-start off --metrics <metrics> ...\n"
              f"# metrics this ncu does not know, dropped: {dropped or 'none'}\n")
    run = ncu.run_child(__file__, ["--inside", "--shape", "x".join(map(str, args.shape)),
                                   *(["--candidates", *args.candidates] if args.candidates else [])],
                        metrics, args.out, ncu=args.ncu, header=header)
    if run.returncode != 0:
        raise SystemExit(f"ncu exited with {run.returncode}; its output is in {args.out}")
    import pandas as pd
    table = ncu.read(args.out).set_index("contender").drop(columns=["kernel"]).T
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3g}".format):
        print(table)
    print(f"\n{args.out}")


if __name__ == "__main__":
    main()
