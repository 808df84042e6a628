"""Probe: the Hopper GEMM with its operands' roles swapped (`Options.swap_ab`), c^T = b^T a^T, so that our M runs
along WGMMA's N, timed against the rule's pick and torch.matmul.

Why (`gemm_cublas_census_probe.py`, an H100): at every shape of the rule check cuBLAS's kernel puts our M on the
WGMMA's N side, whose size goes in steps of 8, and sizes it to M: 96 at M = 96, 104 x 2 at M = 200, 288 x 3 at
M = 800, 192 x 8 at M = 1500, 208 x 17 at M = 3500, with our N in 64-row WGMMA blocks. Our kernel puts M on
WGMMA's M side (64 or 128 rows a tile), which pads M = 96 to 128 and M = 800 to 896 rows of tensor-core work.

The swapped build changes only the kernel's views of the operands (`gemm_kernels.hopper`, "Swapped operands"). It
was first built here, as a subclass of `HopperGemm`; the rounds below were timed with that subclass, whose SASS was
the library option's instruction for instruction (only the kernel's name differs).

    python gemm_swap_ab_probe.py OUT_DIR [first|wide|more|candidates|widths]   # each build exact on small integers, then
                                                        # timed against the rule's pick (the round's shapes: ROUNDS)
"""
from __future__ import annotations

import functools
import sys

import torch

from gemm_kernels import hopper_host
from gemm_kernels.hopper_options import Options


def swapped_options(tile_n: int, cluster_m: int = 1, stream_k: bool = False) -> Options:
    """The build: 128-row tiles of our N, `tile_n` of our M, the staged epilogue, the deepest ring that fits;
    `cluster_m` CTAs along our N share each tile of our A."""
    return Options(swap_ab=True, tile=(128, tile_n, 64), epilogue="staged", schedule="uniform", cluster_m=cluster_m,
                   stream_k=stream_k)


# (M, N, K): the swapped builds to time there, (tile_n, cluster_m, stream_k)
SHAPES = {
    (800, 5000, 3000): [(160, 1, False), (160, 2, False), (160, 2, True), (224, 2, True)],
    (96, 12288, 8192): [(96, 1, False), (96, 2, False), (96, 2, True)],
    (200, 4096, 6144): [(224, 1, False), (224, 2, True), (96, 2, True)],
    (1500, 2504, 3000): [(192, 1, False), (192, 2, False), (96, 2, True)],
    (1234, 5672, 3000): [(96, 2, False), (224, 2, False)],
    (3500, 1800, 2712): [(224, 1, False), (224, 2, False)],
    (4097, 4104, 4104): [(160, 2, False), (160, 2, True)],
    (4096, 4096, 4096): [(256, 2, False), (192, 2, False)],
}
# the second round: cuBLAS's own recipes at the two shapes where the first round paid (`gemm_cublas_census_probe.py`:
# 128x288 in clusters of 4 along our N at 800 x 5000 x 3000, 128x96 in clusters of 4 at 96 x 12288 x 8192)
WIDE = {
    (800, 5000, 3000): [(160, 2, True), (288, 4, False), (288, 2, False), (288, 4, True)],
    (96, 12288, 8192): [(96, 1, False), (96, 4, False), (96, 4, True)],
}
# the third: clusters of 4 along our N at more of the rule check's weakest shapes (skinny, K-heavy, odd)
MORE = {
    (384, 5120, 10240): [(128, 4, False), (192, 4, True)],
    (256, 4096, 14336): [(64, 4, False), (128, 4, True)],
    (128, 14336, 14336): [(64, 4, False), (128, 4, False)],
    (1024, 1024, 8192): [(64, 4, False), (128, 4, True)],
    (3000, 3000, 3000): [(192, 4, False), (96, 4, False)],
    (1234, 5672, 3000): [(224, 4, False)],
    (4096, 4096, 4096): [(256, 4, False), (288, 4, False)],
}
# the fourth: the library's swapped candidates (`configs.HOPPER_CANDIDATES`, "... swapped") at the 24 shapes where
# gemm(a, b) was slowest against torch.matmul in the rule check on the H200 (data/measured/h200/gemm_rule_check.csv,
# kernel time back to back, at eb9634a; slowest first): where an H200 sweep should find them paying
CHECK_WORST = [(800, 5000, 3000), (1500, 2504, 3000), (96, 12288, 8192), (1024, 1024, 8192), (16, 8192, 8192),
               (1536, 1024, 8192), (1024, 4096, 1024), (1024, 1024, 32768), (1024, 2048, 4096), (2048, 1024, 1024),
               (2048, 1024, 4096), (128, 4096, 4096), (1536, 6144, 1024), (1536, 1536, 12288), (4097, 4104, 4104),
               (256, 4096, 14336), (512, 2048, 16384), (1024, 8192, 1024), (1024, 1024, 1024), (384, 5120, 10240),
               (4096, 2048, 1024), (256, 8192, 4096), (1024, 1024, 16384), (1024, 2048, 8192)]
CANDIDATES = {shape: [(288, 4, False), (128, 4, False), (96, 4, False)] for shape in CHECK_WORST}
# the fifth: other widths in fours where the wave model (`gemm_kernels.swap_ab.widths`: makespan x width, then loads
# per MAC) ranks one above the candidates' 96, 128 and 288 (notes/perf-log.md, "swapped widths beside the candidates")
WIDTHS = {
    (800, 5000, 3000): [(288, 4, False), (256, 4, False), (160, 4, False)],
    (1500, 2504, 3000): [(288, 4, False), (256, 4, False), (128, 4, False)],
    (1234, 5672, 3000): [(288, 4, False), (256, 4, False), (128, 4, False)],
    (3500, 1800, 2712): [(288, 4, False), (256, 4, False), (160, 4, False), (96, 4, False)],
    (1536, 1536, 12288): [(96, 4, False), (160, 4, False), (256, 4, False)],
    (2999, 2000, 4000): [(288, 4, False), (256, 4, False), (224, 4, False)],
    (999, 7000, 5000): [(288, 4, False), (256, 4, False), (128, 4, False)],
    (6000, 3000, 2000): [(288, 4, False), (256, 4, False)],
    (1024, 1024, 32768): [(96, 4, False), (128, 4, False)],
}
ROUNDS = {"first": SHAPES, "wide": WIDE, "more": MORE, "candidates": CANDIDATES, "widths": WIDTHS}


def main(out_dir: str, round_name: str = "first") -> None:
    import pandas as pd
    from probe_rows import save, timed_rows
    from gemm_kernels import rule
    g = torch.Generator(device="cuda").manual_seed(11)
    rows = []
    for (M, N, K), builds in ROUNDS[round_name].items():
        builds = {f"swapped {t} cluster{c}{' stream-k' if sk else ''}": swapped_options(t, c, sk)
                  for t, c, sk in builds}
        # exact on small integers (every sum below 2^8 fits bf16 exactly), tails included
        a = torch.randint(-2, 3, (M, K), device="cuda", generator=g).bfloat16()
        b = torch.randint(-2, 3, (K, N), device="cuda", generator=g).bfloat16()
        want = (a.float() @ b.float()).clamp(-256, 256)
        for name, options in builds.items():
            got = hopper_host.gemm(a, b, options, out=torch.full((M, N), float("nan"), device="cuda").bfloat16())
            torch.cuda.synchronize()
            small = want.abs() < 256
            if torch.isnan(got).any() or not torch.equal(got.float()[small], want[small]):
                raise AssertionError(f"{name} at {M}x{N}x{K}: {(got.float() != want).sum().item()} wrong")
        sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
                 torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(2)]
        pick = rule.choose(M, N, K)
        fns = {"torch.matmul": torch.matmul, f"pick: {pick}": hopper_host.gemm}
        fns.update({n: functools.partial(hopper_host.gemm, options=options) for n, options in builds.items()})
        rows += timed_rows(fns, sets, f"pick: {pick}", 8, M=M, N=N, K=K)
        df = save(rows, f"{out_dir}/gemm_swap_ab{'' if round_name == 'first' else '_' + round_name}.csv")
    pd.set_option("display.width", 220)
    print(df.pivot_table(index=["M", "N", "K", "contender"], columns="timing", values="ratio").round(3).to_string())


if __name__ == "__main__":
    main(*sys.argv[1:])
