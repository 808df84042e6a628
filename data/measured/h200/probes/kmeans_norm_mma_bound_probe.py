"""Probe (an upper bound, wrong answers on purpose): what would the k-means kernel gain if the half norms came out
of the tensor cores instead of being written into the accumulator before each tile's WGMMAs?

The idea it bounds (issue 19): put -0.5 * ||c||^2 into the product as extra K columns (x's extra columns 1, c's the
norm split into bf16 parts), so each warpgroup stops loading the tile's norms from shared memory and copying them
into its accumulator (per tile and thread 16 LDS.64 and 32 register moves at 128 columns), at the price of one more
k16 WGMMA per tile. The bound build does only the costs of that: no norms into the accumulator (the first WGMMA
starts it at zero) and one extra k16 WGMMA per tile (on the tile's first 16 columns of D again), so it computes no
correct argmin; the producer still stages the norms. Against `lazy_index` as `auto` runs it, through the same
kind of launch cache, taking turns: CUPTI GPU time and both timings (`workbook.timing.compare`).
    python kmeans_norm_mma_bound_probe.py OUT_DIR   (its run: kmeans_norm_mma_bound_<commit>.csv)"""
import sys

import cutlass.cute as cute
import pandas as pd
import torch

import kmeans_kernels
from kmeans_ablation_probe import launcher     # a build compiled and launched through a launch cache
from kmeans_kernels import bench, hopper
from probe_rows import save, timed_rows

out_dir = sys.argv[1]
SHAPES = [(65536, 64, 4096), (65536, 64, 16384), (65536, 128, 4096), (262144, 128, 16384), (65536, 64, 512),
          (65536, 128, 512)]
VARIANT = "lazy_index"


class NormsFromTheMma(hopper.HopperAssign):
    """lazy_index without the norms in the accumulator and with one more k16 WGMMA per tile (its cost only)."""

    def _norms_into_acc(self, k, acc, slot_index):
        pass

    def _slot_mmas(self, k, mma, acc, db, slot_index):
        steps = hopper.BLOCK_D // 16
        for s in range(steps + (1 if db == 0 else 0)):
            mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, db + s > 0)
            cute.gemm(mma, acc, k.frag_x[(None, None, db * steps + s % steps, 0)],
                      k.frag_c[(None, None, s % steps, slot_index)], acc)


rows = []
for N, D, K in SHAPES:
    sets = bench.input_sets(N, D, K)
    outs = [torch.empty(N, dtype=torch.int32, device="cuda") for _ in range(2)]
    runs = {"lazy_index": launcher(hopper.HopperAssign, D, sets[0][0].dtype),
            "norms from the MMA (bound)": launcher(NormsFromTheMma, D, sets[0][0].dtype)}
    fns = {name: (lambda x, c, c_sq, run=run, out=out: run(x, c, c_sq, out))
           for (name, run), out in zip(runs.items(), outs)}
    x, c, c_sq = sets[0]
    fns["lazy_index"](x, c, c_sq)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], kmeans_kernels.assign(x, c, c_sq=c_sq, variant=VARIANT))   # the launcher's wiring
    rows += timed_rows(fns, sets, "lazy_index", 10, N=N, D=D, K=K)
    df = save(rows, f"{out_dir}/kmeans_norm_mma_bound.csv")

pd.set_option("display.width", 220)
print(df.pivot_table(index=["N", "D", "K", "contender"], columns="timing",
                     values=["ratio", "ratio_lo", "ratio_hi"]).round(3).to_string())
