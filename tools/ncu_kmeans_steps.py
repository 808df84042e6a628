"""Nsight Compute on the k-means steps 1-3 at one shape, or on the library's variants at several: stall reasons,
issue-slot use, occupancy (one device call).

    python tools/ncu_kmeans_steps.py                      # -> data/measured/h200/kmeans_steps_ncu.txt
    python tools/ncu_kmeans_steps.py --shape 65536,128,4096 --out /tmp/ncu.txt
    python tools/ncu_kmeans_steps.py --variants lean_ping_pong,lean_select --shape 65536,64,16384 262144,128,4096 \
        --out /tmp/ncu_variants.txt                       # kmeans_kernels.hopper's variants, each shape it takes

Runs itself under `ncu --clock-control none --profile-from-start off --metrics ...` (`--child`): the kernels are
compiled and warmed up before the profiler window opens, then each is launched once inside it, after a
`profiled: <step>` line on stderr, so kmeans_kernels.steps.evidence.read_ncu pairs every kernel with its step.
Launches go direct (WORKBOOK_LAUNCH_GRAPHS=0), not through CUDA graphs. If the installed ncu refuses a metric, the
run is repeated with the metrics it lists (ncu --query-metrics), then with a minimal set and the warp-state
sections. About a minute on the H200, most of it compiling.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STEPS = ("step1_serial", "step2_ilp2", "step3_norm_broadcast")
DEFAULT_OUT = ROOT / "data" / "measured" / "h200" / "kmeans_steps_ncu.txt"


# what a variant run adds to the steps' metrics: where occupancy stops, and which pipes the scan keeps busy
VARIANT_METRICS = ("launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
                   "launch__registers_per_thread", "sm__warps_active.avg.pct_of_peak_sustained_active",
                   "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active",
                   "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
                   "sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active")


def _contenders(shapes, variants):
    """(label, shape, call) for each step at the one shape, or each variant at each shape it takes."""
    from kmeans_kernels import hopper
    from workbook import stepper
    if not variants:
        steps = {name: stepper.load(f"kmeans_kernels.steps.{name}") for name in STEPS}
        return [(name, shapes[0], module.assign) for name, module in steps.items()]
    out = []
    for shape in shapes:
        for variant in variants:
            try:
                hopper.check_variant(variant, shape[1])
            except ValueError as e:
                print(f"skipped {variant} at {shape}: {e}", file=sys.stderr)
                continue
            out.append((variant, shape, lambda x, c, c_sq, v=variant: _run_variant(v, x, c, c_sq)))
    return out


def _run_variant(variant, x, c, c_sq):
    import torch
    from kmeans_kernels import hopper
    out = torch.empty(x.shape[0], dtype=torch.int32, device=x.device)
    hopper.run(variant, x, c, c_sq, out)
    return out


def child(shapes, variants) -> None:
    from kmeans_kernels import bench
    from workbook import ncu
    contenders = _contenders(shapes, variants)
    inputs = {shape: bench.input_sets(*shape)[0] for shape in {s for _, s, _ in contenders}}
    ncu.profile_each([(f"{name} {N}x{D}x{K}", lambda call=call, i=inputs[N, D, K]: call(*i))
                      for name, (N, D, K), call in contenders], warmup=2)


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
    ap.add_argument("--shape", nargs="+", default=["262144,128,4096"],
                    help="N,D,K (default: 262144,128,4096); several with --variants")
    ap.add_argument("--variants", default="", help="comma-separated kmeans_kernels.hopper variants instead of the steps")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in shape.split(",")) for shape in args.shape]
    variants = [v for v in args.variants.split(",") if v]
    if len(shapes) > 1 and not variants:
        ap.error("several shapes need --variants (the steps are profiled at one shape)")
    if args.child:
        child(shapes, variants)
        return 0
    ncu_bin = shutil.which("ncu")
    if ncu_bin is None:
        print("ncu (Nsight Compute) is not on PATH: run this on the GPU machine")
        return 2
    from kmeans_kernels.steps import evidence
    from workbook import ncu, records
    args.out.parent.mkdir(parents=True, exist_ok=True)
    program = ["--child", "--shape", *args.shape, "--variants", args.variants]
    wanted = list(evidence.METRICS) + (list(VARIANT_METRICS) if variants else [])
    minimal = ["gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"]
    # every metric; else those this ncu lists; else the ones known to work here plus the warp-state and
    # scheduler sections (human-readable lines: the report is kept, the table below may then be short)
    attempts = [(wanted, []), (known_metrics(ncu_bin, wanted), []),
                (minimal, ["--section", "WarpStateStats", "--section", "SchedulerStats"])]
    prov = records.provenance()
    for metrics, sections in attempts:
        what = f"variants {args.variants}" if variants else "steps"
        header = (f"# ncu of the k-means {what} at {' '.join(args.shape)}: commit {prov['commit']}, {prov['date']}, "
                  f"{prov['gpu']}; metrics: {len(metrics)} of {len(wanted)}"
                  f"{'; sections ' + ' '.join(sections[1::2]) if sections else ''}\n")
        run = ncu.run_child(__file__, program, metrics, args.out, ncu=ncu_bin, ncu_args=sections, header=header)
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
