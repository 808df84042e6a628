"""Probe: the Hopper GEMM with its operands' roles swapped, c^T = b^T a^T, so that our M runs along WGMMA's N.

Why (`gemm_cublas_census_probe.py`, an H100): at every shape of the rule check cuBLAS's kernel puts our M on the
WGMMA's N side, whose size goes in steps of 8, and sizes it to M: 96 at M = 96, 104 x 2 at M = 200, 288 x 3 at
M = 800, 192 x 8 at M = 1500, 208 x 17 at M = 3500, with our N in 64-row WGMMA blocks. Our kernel puts M on
WGMMA's M side (64 or 128 rows a tile), which pads M = 96 to 128 and M = 800 to 896 rows of tensor-core work.

The swapped build is `HopperGemm` with three views changed (its `views` and major modes), nothing else in the kernel:
  * A' = b viewed as (N, K) with N contiguous: an MN-major operand (today's B view, now in A's place);
  * B' = a as (M, K), K-major: any multiple of 8 rows is a whole 128-byte swizzle atom, so the tile's width
    (our M extent) may be 96, 160, 224 (multiples of the staged epilogue's 32-column sub-tile);
  * C' = c viewed as (N, M) with N contiguous: column-major, written by the staged epilogue through a
    transposing stmatrix and a TMA store (the register epilogue's 16-byte row stores assume row-major C).
The kernel's M' is our N, its N' our M; its plan, clusters and stream-K are the library's, on (N, M).

    python gemm_swap_ab_probe.py OUT_DIR [first|wide]   # each build exact on small integers, then timed against the
                                                        # rule's pick (the round's shapes: ROUNDS)
"""
from __future__ import annotations

import functools
import sys

import cutlass.cute as cute
import torch
from cutlass.cute.runtime import make_fake_stream
from cutlass.tensor_utils import LayoutEnum

from gemm_kernels import hopper_host
from gemm_kernels.hopper import HopperGemm
from gemm_kernels.hopper_options import ALIGN, ARCH, EPI_N, STAGED_BUFFERS, TILE_K, TILE_M, Config, stage_count
from gemm_kernels.hopper_worklist import band_rows_for, work_rows
from workbook import gpus, launch


class SwappedGemm(HopperGemm):
    """c [M, N] = a @ b computed as c^T = b^T a^T: the kernel's (M', N') = (N, M), its A' = b^T, B' = a. Only the
    views change (`HopperGemm.views`, the major modes, `tiled_mma_for`); launched with a_ptr = our b, b_ptr = our a
    and the sizes (M', N', K)."""

    a_major, b_major, c_major = LayoutEnum.COL_MAJOR, LayoutEnum.ROW_MAJOR, LayoutEnum.COL_MAJOR

    def views(self, a_ptr, b_ptr, c_ptr, M, N, K):
        """M is M' (our N, a multiple of 8), N is N' (our M, any size): A' = b ([K, M'] row-major) as the MN-major
        (M', K), B' = a ([N', K] row-major) K-major, C' = c ([N', M'] row-major) as the column-major (M', N')."""
        k8, m8 = cute.assume(K, divby=ALIGN), cute.assume(M, divby=ALIGN)
        return (cute.make_tensor(a_ptr, cute.make_layout((M, K), stride=(1, m8))),
                cute.make_tensor(b_ptr, cute.make_layout((N, K), stride=(k8, 1))),
                cute.make_tensor(c_ptr, cute.make_layout((M, N), stride=(1, m8))))

    def tiled_mma_for(self, n):
        # a width past WGMMA's 256 is several 96-wide WGMMAs per k16 step (cute.gemm walks the MMA's N mode)
        return super().tiled_mma_for(atom_n(n))


def atom_n(tile_n: int) -> int:
    """One WGMMA's width: the tile's, or 96 where the tile is wider than WGMMA's 256 (288 = 3 x 96: each 32-column
    epilogue sub-tile then lies inside one WGMMA's columns)."""
    return tile_n if tile_n <= 256 else 96


def swapped_config(tile_n: int, cluster_m: int = 1, stream_k: bool = False, dtype=torch.bfloat16) -> Config:
    """The build's Config: 128-row tiles of our N (two consumer warpgroups), `tile_n` of our M (a multiple of
    EPI_N up to 256, or 288), the staged epilogue, the deepest ring that fits; `cluster_m` CTAs (1, 2 or 4) along
    our N share each tile of our A."""
    if tile_n % EPI_N or not (EPI_N <= tile_n <= 256 or tile_n == 288):
        raise ValueError(f"tile_n must be a multiple of {EPI_N} up to 256, or 288, got {tile_n}")
    if cluster_m not in (1, 2, 4) or tile_n % (8 * cluster_m):
        raise ValueError(f"cluster_m must be 1, 2 or 4 and split tile_n into whole 8-row atoms, got {cluster_m}")
    tile = (TILE_M, tile_n, TILE_K)
    return Config(dtype=dtype, tile_m=TILE_M, tile_n=tile_n, stages=stage_count(tile, "staged"), epilogue="staged",
                  epi_stages=STAGED_BUFFERS, cluster_m=cluster_m, stream_k=stream_k)


def compile_swapped(cfg: Config, dump_dir=None):
    """Compile with no GPU (workbook.sass.Artifacts): the CPU check that the build traces and assembles."""
    from workbook import sass
    args = hopper_host._args(cfg, 16, 16, 16, 16, 16, 16, 16, 4096, 800, 3000, 1, cfg.cluster_size,
                             make_fake_stream())
    return sass.compile_for(SwappedGemm(cfg), *args, arch=ARCH, dump_dir=dump_dir)


@functools.lru_cache(maxsize=None)
def _launches(cfg: Config, device: int) -> launch.LaunchCache:
    dummy = hopper_host._args(cfg, 16, 16, 16, 16, 16, 16, 16, ALIGN, 1, ALIGN, 1, 1, make_fake_stream())
    with launch.on_device(device):
        compiled = cute.compile(SwappedGemm(cfg), *dummy, options=f"--gpu-arch {ARCH}")
    return launch.LaunchCache(compiled, device=device, pointers=7)


@functools.lru_cache(maxsize=None)
def _prepare(M: int, N: int, K: int, cfg: Config, device: int):
    """The library's _Call for the swapped problem (M', N') = (N, M)."""
    from gemm_kernels import waves
    plan = waves.plan(N, M, gpu=gpus.current() or gpus.H200, tile_m=cfg.tile_m * cfg.cluster_m,
                      tile_ns=(cfg.tile_n,), balanced=False, schedule="static", ctas_per_item=cfg.cluster_size)
    rows, partial_slots = work_rows(plan.items, band_rows_for(K, cfg.tile_m), plan.slots, -(-K // TILE_K),
                                    cfg.stream_k, cfg.tile_m)
    work = torch.tensor(rows, dtype=torch.int32, device=torch.device("cuda", device))
    slots = min(len(rows), plan.slots)
    sizes = (N, M, K, len(rows), slots * cfg.cluster_size)
    out_like = torch.empty(1, dtype=cfg.dtype, device=work.device).expand(M, N)
    return hopper_host._Call(cfg, plan, work, _launches(cfg, device), sizes, out_like, partial_slots)


def swapped_gemm(a: torch.Tensor, b: torch.Tensor, cfg: Config, out: torch.Tensor | None = None) -> torch.Tensor:
    """c = a @ b through the swapped build (operands as `gemm_kernels.gemm` takes them)."""
    (M, K), N = a.shape, b.shape[1]
    call = _prepare(M, N, K, cfg, a.get_device())
    out = torch.empty_like(call.out_like) if out is None else out
    hopper_host._launch(call, b, a, out, launch.stream_handle(a.get_device()))   # A' = b, B' = a
    return out


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
ROUNDS = {"first": SHAPES, "wide": WIDE, "more": MORE}


def main(out_dir: str, round_name: str = "first") -> None:
    import pandas as pd
    from probe_rows import save, timed_rows
    from gemm_kernels import rule
    g = torch.Generator(device="cuda").manual_seed(11)
    rows = []
    for (M, N, K), builds in ROUNDS[round_name].items():
        cfgs = {f"swapped {t} cluster{c}{' stream-k' if sk else ''}": swapped_config(t, c, sk) for t, c, sk in builds}
        # exact on small integers (every sum below 2^8 fits bf16 exactly), tails included
        a = torch.randint(-2, 3, (M, K), device="cuda", generator=g).bfloat16()
        b = torch.randint(-2, 3, (K, N), device="cuda", generator=g).bfloat16()
        want = (a.float() @ b.float()).clamp(-256, 256)
        for name, cfg in cfgs.items():
            got = swapped_gemm(a, b, cfg, out=torch.full((M, N), float("nan"), device="cuda").bfloat16())
            torch.cuda.synchronize()
            small = want.abs() < 256
            if torch.isnan(got).any() or not torch.equal(got.float()[small], want[small]):
                raise AssertionError(f"{name} at {M}x{N}x{K}: {(got.float() != want).sum().item()} wrong")
        sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
                 torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(2)]
        pick = rule.choose(M, N, K)
        fns = {"torch.matmul": torch.matmul, f"pick: {pick}": hopper_host.gemm}
        fns.update({n: functools.partial(swapped_gemm, cfg=cfg) for n, cfg in cfgs.items()})
        rows += timed_rows(fns, sets, f"pick: {pick}", 8, M=M, N=N, K=K)
        df = save(rows, f"{out_dir}/gemm_swap_ab{'' if round_name == 'first' else '_' + round_name}.csv")
    pd.set_option("display.width", 220)
    print(df.pivot_table(index=["M", "N", "K", "contender"], columns="timing", values="ratio").round(3).to_string())


if __name__ == "__main__":
    main(*sys.argv[1:])
