"""Probe: the producer's first work row read at the kernel's start, before the barriers' init and the cluster's
handshake, against read where it is used, after them (`Options.prefetch_row` of
notes/patches/gemm-prefetch-row-ab.patch, applied for the run; not in the library: it timed level).

The traces (`gemm_fixed_costs_trace_probe.py`, an H100) put 1.0-1.1 us between a CTA having its first row and that
row's first K-block landing; part of it is the producer's dependent read of its work row from global memory (an L2
hit) before its first TMA load can be issued. cuBLAS computes its tile from the block index. The off build's SASS
is the library's before the change, hash for hash (four variants checked). Both as `gemm(a, b)` runs the rule's
choice (`rule.options_for`), taking turns with torch.matmul, exact on small integers first.

    python gemm_prefetch_row_probe.py OUT_DIR   (its run: gemm_prefetch_row_<commit>.csv)"""
import dataclasses
import sys

import pandas as pd
import torch

from gemm_kernels import hopper_host, rule
from probe_rows import save, timed_rows

SHAPES = [(1024, 1024, 1024), (1024, 2048, 1024), (2048, 1024, 1024), (1024, 4096, 1024), (16, 4096, 4096),
          (128, 4096, 4096), (2048, 2048, 2048), (512, 4096, 4096), (1536, 6144, 1024), (1024, 1024, 8192),
          (4096, 4096, 4096)]


def main(out_dir: str) -> None:
    g = torch.Generator(device="cuda").manual_seed(29)
    rows = []
    for M, N, K in SHAPES:
        on = rule.options_for(M, N, K)
        builds = {"row read early": on, "row read late": dataclasses.replace(on, prefetch_row=False)}
        fns = {"torch.matmul": torch.matmul}
        fns.update({n: (lambda a, b, o=o, out=None: hopper_host.gemm(a, b, o, out=out)) for n, o in builds.items()})
        ints = [torch.randint(-2, 3, s, device="cuda", generator=g).bfloat16() for s in ((M, K), (K, N))]
        want = torch.matmul(ints[0].float(), ints[1].float()).bfloat16()
        for name in builds:
            out = torch.full((M, N), float("nan"), device="cuda").bfloat16()
            assert torch.equal(fns[name](*ints, out=out), want), (M, N, K, name)
        sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
                 torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(2)]
        rows += timed_rows(fns, sets, "row read late", 10, M=M, N=N, K=K, pick=rule.choose(M, N, K))
        df = save(rows, f"{out_dir}/gemm_prefetch_row.csv")
    pd.set_option("display.width", 220)
    print(df[df.contender == "row read early"].pivot_table(index=["M", "N", "K", "pick"], columns="timing",
                                                           values=["ratio", "ratio_lo", "ratio_hi"]).round(3)
          .to_string())


if __name__ == "__main__":
    main(*sys.argv[1:])
