"""Probe: the host time of `gemm(a, b, out=)` with the given output's fast path (`hopper_host._fits_out`) against
the named checks it skips (the path before it: `_fits_out` forced False), and `gemm(a, b)` with a fresh output.
The graph-switch probe (`gemm_graph_switch_bd65dcd.csv`) saw `gemm(a, b, out=)` spend 4-8 us of host above its
launch. Host time per call (`tools/host_cost.host_us`, three input sets in turn) and both timings with 95 %
intervals against the fast path (`timing.compare`, 12 rounds).

    python gemm_out_fast_path_probe.py OUT_DIR   (gemm_out_fast_path_<commit>.csv)"""
import itertools
import sys
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

from host_cost import host_us  # noqa: E402

from gemm_kernels import gemm, hopper_host  # noqa: E402
from probe_rows import gemm_sets, timing_columns  # noqa: E402
from workbook import records, timing  # noqa: E402

SHAPES = [(1024, 1024, 1024), (4096, 2048, 1024)]
FITS_OUT = hopper_host._fits_out


def named_checks(a, b, out):
    hopper_host._fits_out = lambda *args: False
    try:
        return gemm(a, b, out=out)
    finally:
        hopper_host._fits_out = FITS_OUT


def main(out_dir: str) -> None:
    g = torch.Generator(device="cuda").manual_seed(47)
    rows = []
    for M, N, K in SHAPES:
        sets = gemm_sets(M, N, K, g)
        outs = {id(a): torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for a, _ in sets}
        fns = {"out=, fast path": lambda a, b: gemm(a, b, out=outs[id(a)]),
               "out=, named checks": lambda a, b: named_checks(a, b, outs[id(a)]),
               "new out": gemm}
        for f, fn in fns.items():
            for a, b in sets:
                assert torch.equal(fn(a, b), gemm(a, b)), f
        cmp = timing.compare(fns, sets, baseline="out=, fast path", rounds=12, calls=20)
        for f, fn in fns.items():
            row = dict(M=M, N=N, K=K, contender=f,
                       host_us=host_us(lambda fn=fn, turn=itertools.cycle(sets): fn(*next(turn)), chunks=20,
                                       per_chunk=21))
            row.update(timing_columns(cmp, f))
            rows.append(row)
        df = records.write_probe(pd.DataFrame(rows), f"{out_dir}/gemm_out_fast_path_{records.provenance()['commit']}.csv")
    with pd.option_context("display.width", 250, "display.float_format", "{:.3g}".format):
        print(df[["M", "N", "K", "contender", "host_us", "latency_us", "latency", "latency_lo", "latency_hi",
                  "kernel_us", "kernel", "kernel_lo", "kernel_hi"]].to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1])
