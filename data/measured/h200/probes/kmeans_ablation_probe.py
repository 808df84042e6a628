"""Probe (wrong answers on purpose): where the time of the k-means kernel goes, by taking one part out at a time.
Builds of `lazy_index`, each a subclass of `hopper.HopperAssign` that drops one piece:
  * "no fold": the tile's argmin is not run (the WGMMAs, the ring, the turns and the norms stay; one max of two
    accumulator values per tile, into the index, keeps the WGMMAs alive: with none read, ptxas drops them);
  * "MMA / 4": one k16 WGMMA per 64-deep slot instead of four (a quarter of the tensor work; with none, the
    accumulator would hold the same norms in both rows of a thread and ptxas would fold one row for both);
  * "no turns": the two warpgroups do not take turns at the tensor cores (each waits for its own WGMMAs, then folds).
If taking out X leaves the time where it was, X is hidden under the rest; what it removes is X's share of the
critical path. CUPTI GPU time and both timings against the full build (`workbook.timing.compare`).
    python kmeans_ablation_probe.py OUT_DIR   (its run: kmeans_ablation_<commit>.csv)"""
import sys

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import pandas as pd
import torch

from kmeans_kernels import bench, hopper
from probe_rows import save, timed_rows
from workbook import launch

SHAPES = [(65536, 64, 4096), (65536, 64, 16384), (65536, 128, 4096), (65536, 64, 512), (262144, 128, 16384)]
VARIANT = "lazy_index"


class NoFold(hopper.HopperAssign):
    def _argmin(self, k, acc, tile):
        k.best_index[0, 0] = cutlass.select_(acc[0] > acc[cute.size(acc) - 1], tile, k.best_index[0, 0])


class QuarterMma(hopper.HopperAssign):
    def _slot_mmas(self, k, mma, acc, db, slot_index):
        mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        first_step = db * (hopper.BLOCK_D // 16)
        cute.gemm(mma, acc, k.frag_x[(None, None, first_step, 0)], k.frag_c[(None, None, 0, slot_index)], acc)


class NoTurns(hopper.HopperAssign):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.ping_pong = False


def launcher(kernel_class, D, dtype, variant=VARIANT, grid_of=None):
    """A build of `variant` launched through a launch cache as `hopper.launcher` does, its grid capped as the
    library caps `grid_of`'s (default: the variant's own)."""
    kernel = kernel_class(variant, D, hopper._cutlass_dtype(dtype))
    compiled = cute.compile(kernel, *hopper._placeholder_args(dtype), options="--gpu-arch sm_90a")
    cache = launch.LaunchCache(compiled, device=0, pointers=4, reaimable=(2, 3))
    ctas = hopper.grid_cap(grid_of or variant, D, 0)

    def run(x, c, c_sq, out):
        addrs = (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr(), x.shape[0], c.shape[0], ctas)
        cache(addrs, lambda s: hopper._args(dtype, *addrs, cuda.CUstream(s)), launch.stream_handle(0))
    return run


BUILDS = {"full": hopper.HopperAssign, "no fold": NoFold, "MMA / 4": QuarterMma, "no turns": NoTurns}


def main(out_dir):
    rows = []
    for N, D, K in SHAPES:
        sets = bench.input_sets(N, D, K)
        fns = {}
        for name, cls in BUILDS.items():
            run, out = launcher(cls, D, sets[0][0].dtype), torch.empty(N, dtype=torch.int32, device="cuda")
            fns[name] = lambda x, c, c_sq, run=run, out=out: run(x, c, c_sq, out)
        rows += timed_rows(fns, sets, "full", 8, N=N, D=D, K=K)
        df = save(rows, f"{out_dir}/kmeans_ablation.csv")

    pd.set_option("display.width", 220)
    print(df[df.timing == "gpu"].pivot_table(index=["N", "D", "K"], columns="contender", values="us_median").round(1)
          .to_string())


if __name__ == "__main__":
    main(sys.argv[1])
