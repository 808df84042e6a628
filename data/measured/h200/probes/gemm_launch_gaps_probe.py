"""Probe: at shapes where the GPU sets the pace, why does `gemm(a, b)` lose more to torch.matmul back to back than in
its kernel's own time?

In the H200's rule checks (eb9634a, 41a9813, 036f179) at the shapes where both kernels take 25-150 us, the back-to-back
time per call exceeds the kernel's CUPTI duration (`sweep.gpu_ms`, a pass of its own) by 0.5-3.3 us more for ours
than for cuBLAS at 90-97 % of them: 1-3 points of each class's median. Either the GPU idles longer between our
kernels (graph replays against cuBLAS's launches, which may be programmatic dependents), or our kernels run slower
back to back than in the CUPTI pass (more energy per call at the board's power cap: `gemm_clocks_sustained_fde0186.csv`).
One CUPTI trace of 60 calls back to back separates the two: each kernel's median duration in that regime, the median
idle gap between consecutive kernels and how many start before the one before ends (an overlap: a programmatic
dependent). Beside it both timings with 95 % intervals (`timing.compare`, 10 rounds) and the CUPTI pass's duration,
for the rule's pick as `gemm(a, b)` runs it, the same build as a programmatic dependent (`Options.pdl`, through the
launch cache's graphs as shipped), and torch.matmul.

    python gemm_launch_gaps_probe.py OUT_DIR   (gemm_launch_gaps_<commit>.csv)"""
import dataclasses
import statistics
import sys
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from gemm_kernels import gemm, rule, sweep  # noqa: E402
from probe_rows import kernel_spans  # noqa: E402
from workbook import records, timing  # noqa: E402

# one per class where the gap differs most, with GPU times of 25-150 us on the H200
SHAPES = [(1536, 1024, 8192), (3072, 1024, 24576), (1024, 2048, 8192), (4096, 2048, 1024), (256, 8192, 4096),
          (128, 14336, 4096), (3000, 3000, 3000)]


def trace(fn, sets, calls=60):
    """Over `calls` calls back to back (`probe_rows.kernel_spans`): the kernels' median duration, the median idle
    gap between consecutive kernels (negative where one starts before the one before ends), and the share of such
    overlaps."""
    ks = kernel_spans(fn, sets, calls)
    assert len(ks) == calls - 5, f"{len(ks) + 5} kernels for {calls} calls"
    gaps = [ks[i + 1][0] - ks[i][1] for i in range(len(ks) - 1)]
    return dict(b2b_kernel_us=statistics.median(end - start for start, end in ks),
                gap_us=statistics.median(gaps), overlaps=sum(g < 0 for g in gaps) / len(gaps),
                span_us_per_call=(ks[-1][1] - ks[0][0]) / len(ks))


def main(out_dir: str) -> None:
    g = torch.Generator(device="cuda").manual_seed(37)
    rows = []
    for M, N, K in SHAPES:
        sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
                 torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(3)]
        pdl = dataclasses.replace(rule.options_for(M, N, K), pdl=True)
        fns = {"gemm(a, b)": gemm, "gemm, pdl": lambda a, b: gemm(a, b, pdl), "torch.matmul": torch.matmul}
        want = gemm(*sets[0])
        assert torch.equal(fns["gemm, pdl"](*sets[0]), want), (M, N, K)
        cmp = timing.compare(fns, sets, baseline="torch.matmul", rounds=10, calls=20)
        alone = sweep.gpu_ms(fns, sets)
        for f, fn in fns.items():
            row = dict(M=M, N=N, K=K, pick=rule.choose(M, N, K), contender=f, cupti_pass_us=1e3 * alone[f],
                       **trace(fn, sets))
            for t in (timing.LATENCY, timing.KERNEL):
                r = cmp.ratio(f, t)
                row.update({f"{t}_us": 1e3 * cmp.timing(f, t).ms_median, f"{t}_vs_torch": r.value,
                            f"{t}_lo": r.lo, f"{t}_hi": r.hi})
            rows.append(row)
        df = records.write_probe(pd.DataFrame(rows), f"{out_dir}/gemm_launch_gaps_{records.provenance()['commit']}.csv")
        print(M, N, K, flush=True)
    cols = ["M", "N", "K", "contender", "cupti_pass_us", "b2b_kernel_us", "gap_us", "overlaps", "kernel_us",
            "kernel_vs_torch", "latency_vs_torch"]
    with pd.option_context("display.width", 250, "display.float_format", "{:.3g}".format):
        print(df[cols].to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1])
