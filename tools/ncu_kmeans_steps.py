"""Nsight Compute on the k-means steps 1-3 at one shape: stall reasons and issue-slot use (one device call).

    python tools/ncu_kmeans_steps.py                      # -> data/measured/h200/kmeans_steps_ncu.txt
    python tools/ncu_kmeans_steps.py --shape 65536,128,4096 --out /tmp/ncu.txt

Runs itself under `ncu --clock-control none --profile-from-start off --metrics ...` (`--child`): the kernels are
compiled and warmed up before the profiler window opens, then each is launched once inside it, after a
`profiled: <step>` line on stderr, so kmeans_kernels.steps.evidence.read_ncu pairs every kernel with its step.
Launches go direct (WORKBOOK_LAUNCH_GRAPHS=0), not through CUDA graphs. If the installed ncu refuses a metric, the
run is repeated with the metrics it lists (ncu --query-metrics), then with a minimal set and the warp-state
sections. About a minute on the H200, most of it compiling.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STEPS = ("step1_serial", "step2_ilp2", "step3_norm_broadcast")
DEFAULT_OUT = ROOT / "data" / "measured" / "h200" / "kmeans_steps_ncu.txt"


def child(shape) -> None:
    import torch
    from kmeans_kernels import bench
    from workbook import stepper
    N, D, K = shape
    x, c, c_sq = bench.input_sets(N, D, K)[0]
    steps = {name: stepper.load(f"kmeans_kernels.steps.{name}") for name in STEPS}
    for _ in range(2):
        for module in steps.values():
            module.assign(x, c, c_sq)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, module in steps.items():
        print(f"profiled: {name} {N}x{D}x{K}", file=sys.stderr, flush=True)
        module.assign(x, c, c_sq)
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def known_metrics(ncu: str, wanted) -> list[str]:
    """The wanted metrics whose base name the installed ncu lists for this GPU (all of them if it cannot say)."""
    try:
        listing = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return list(wanted)
    bases = {line.split()[0] for line in listing.splitlines() if line.strip() and "__" in line.split()[0]}
    return [m for m in wanted if m.split(".")[0] in bases] if bases else list(wanted)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="262144,128,4096", help="N,D,K (default: 262144,128,4096)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    shape = tuple(int(v) for v in args.shape.split(","))
    if args.child:
        child(shape)
        return 0
    ncu = shutil.which("ncu")
    if ncu is None:
        print("ncu (Nsight Compute) is not on PATH: run this on the GPU machine")
        return 2
    from kmeans_kernels.steps import evidence
    from workbook import records
    args.out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WORKBOOK_LAUNCH_GRAPHS": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    program = [sys.executable, str(Path(__file__).resolve()), "--child", "--shape", args.shape]
    minimal = ["gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"]
    # every metric; else those this ncu lists; else the ones known to work here plus the warp-state and
    # scheduler sections (human-readable lines: the report is kept, the table below may then be short)
    attempts = [(list(evidence.METRICS), []), (known_metrics(ncu, evidence.METRICS), []),
                (minimal, ["--section", "WarpStateStats", "--section", "SchedulerStats"])]
    prov = records.provenance()
    for metrics, sections in attempts:
        cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", ",".join(metrics),
               *sections, *program]
        with args.out.open("w") as f:
            f.write(f"# ncu of the k-means steps at {args.shape}: commit {prov['commit']}, {prov['date']}, "
                    f"{prov['gpu']}; metrics: {len(metrics)} of {len(evidence.METRICS)}"
                    f"{'; sections ' + ' '.join(sections[1::2]) if sections else ''}\n")
            f.flush()
            run = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        if run.returncode == 0:
            break
        print(f"ncu failed ({run.returncode}) with {len(metrics)} metrics; trying fewer", flush=True)
    else:
        print(f"ncu failed every time; see {args.out}")
        return 1
    table = evidence.stall_table(evidence.read_ncu(args.out))
    print(table.to_string(float_format=lambda v: f"{v:.3g}"))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
