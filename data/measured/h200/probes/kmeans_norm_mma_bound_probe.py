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

import cuda.bindings.driver as cuda
import cutlass.cute as cute
import pandas as pd
import torch

import kmeans_kernels
from gemm_kernels import sweep
from kmeans_kernels import bench, hopper
from workbook import launch, records, timing

out_dir = sys.argv[1]
SHAPES = [(65536, 64, 4096), (65536, 64, 16384), (65536, 128, 4096), (262144, 128, 16384), (65536, 64, 512),
          (65536, 128, 512)]
VARIANT = "lazy_index"


class NormsFromTheMma(hopper.HopperAssign):
    """lazy_index without the norms in the accumulator and with one more k16 WGMMA per tile (its cost only)."""

    def _norms_into_acc(self, k, acc, slot_index):
        pass

    def _issue(self, k, mma, acc, read, release, held: int):
        steps = hopper.BLOCK_D // 16
        cute.nvgpu.warpgroup.fence()
        for db in range(self.d_blocks):
            while held >= self.stages:
                release, held = self._retire(k, release, held, 1)
            k.ring.consumer_wait(read)
            for s in range(steps + (1 if db == 0 else 0)):
                mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, db + s > 0)
                cute.gemm(mma, acc, k.frag_x[(None, None, db * steps + s % steps, 0)],
                          k.frag_c[(None, None, s % steps, read.index)], acc)
            cute.nvgpu.warpgroup.commit_group()
            read.advance()
            held += 1
        return mma, read, release, held


def launcher(kernel_class, D, dtype):
    kernel = kernel_class(VARIANT, D, hopper._cutlass_dtype(dtype))
    compiled = cute.compile(kernel, *hopper._placeholder_args(dtype), options="--gpu-arch sm_90a")
    cache = launch.LaunchCache(compiled, device=0, pointers=4, reaimable=(2, 3))
    ctas = hopper.grid_cap(VARIANT, D, 0)

    def run(x, c, c_sq, out):
        addrs = (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr(), x.shape[0], c.shape[0], ctas)
        cache(addrs, lambda s: hopper._args(dtype, *addrs, cuda.CUstream(s)), launch.stream_handle(0))
    return run


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
    cmp = timing.compare(fns, sets, baseline="lazy_index", rounds=10, calls=20)
    gpu = sweep.gpu_ms(fns, sets)
    for f in fns:
        for t in (timing.LATENCY, timing.KERNEL):
            r = cmp.ratio(f, t)
            rows.append(dict(N=N, D=D, K=K, contender=f, timing=t, us_median=1e3 * cmp.timing(f, t).ms_median,
                             ratio=r.value, ratio_lo=r.lo, ratio_hi=r.hi, rounds=r.rounds))
        rows.append(dict(N=N, D=D, K=K, contender=f, timing="gpu", us_median=1e3 * gpu[f],
                         ratio=gpu[f] / gpu["lazy_index"]))
    print(N, D, K, {k: round(1e3 * v, 1) for k, v in gpu.items()}, flush=True)
    df = pd.DataFrame(rows)
    for key, value in records.provenance().items():
        df[key] = value
    df.to_csv(f"{out_dir}/kmeans_norm_mma_bound.csv", index=False)

pd.set_option("display.width", 220)
print(df.pivot_table(index=["N", "D", "K", "contender"], columns="timing",
                     values=["ratio", "ratio_lo", "ratio_hi"]).round(3).to_string())
