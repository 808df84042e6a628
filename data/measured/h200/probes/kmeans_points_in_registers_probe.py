"""Probe: does a WGMMA that reads the points from registers instead of shared memory cost less energy, and can the
two-CTA kernel afford the registers without its producer warp?

At the board's power cap time is energy (`kmeans_ablation_clocks_*.csv`: the WGMMAs alone hold the board at
700 W), and a WGMMA that reads both operands from shared memory reads a warpgroup's point rows again for every 128
centroids: of the 6 KiB a 64 x 128 x 16 step reads, 2 KiB are points that never change within a point tile.
`RegisterPoints` copies a warpgroup's points into registers once per point tile (16 registers per thread at D = 64,
32 at D = 128) and issues register-operand WGMMAs: a third less shared-memory traffic per score. Its point buffer
goes back to the producer as soon as the copy is done.

The library's build cannot take the registers: two CTAs of 288 threads per SM get at most 96 registers a thread
(`gpus.register_cap`), lazy_index uses 90, and the register build spilled there and ptxas serialized its WGMMAs.
Two ways to give it room, five builds of `lazy_index` in all:
  * at one CTA per SM (`OneCtaPerSm`: the ring as deep as one CTA's shared memory allows, one wave of persistent
    CTAs), the points from shared memory against registers: the operand source alone;
  * at two CTAs per SM without the producer warp (`hopper.HopperAssign.inline_producer`: 256 threads, 128 registers
    each; the first warp of warpgroup 1, which gives each tile's slots back last, loads the point tile and refills
    the ring between its own tiles), from shared memory against registers; the first against the library says what
    the producer warp is worth.
Answers are checked against the library's build on every input set first. CUPTI GPU time and both timings: the
register builds against their shared-memory twins, the others against the library; then each of the four builds
back to back for 3 s at two shapes, taking turns, SM clock and board power sampled (energy per call).
    timeout 600 python kmeans_points_in_registers_probe.py OUT_DIR [BUILD ...]   (a hang ends at the timeout)
(its run: kmeans_points_in_registers_<commit>.csv and kmeans_points_in_registers_clocks_<commit>.csv)"""
import functools
import sys

import cutlass.cute as cute
import pandas as pd
import torch

from kmeans_ablation_probe import launcher
from kmeans_fold_instructions_probe import check
from kmeans_kernels import bench, hopper, reference
from kmeans_kernels.steps import cases
from probe_rows import save, timed_rows
from sustained_clocks import sustained

SHAPES = [(65536, 64, 4096), (65536, 64, 16384), (65536, 128, 4096), (262144, 128, 4096), (262144, 128, 16384),
          (1048576, 128, 4096)]
SUSTAINED = [(65536, 64, 16384), (262144, 128, 16384)]
# checked only, on small integers (exact, with ties) against the reference: tails, and fewer tiles than the ring holds
EXACT = [(5, 64, 1), (300, 64, 129), (1000, 64, 300), (777, 128, 130), (4099, 128, 1000), (2000, 64, 5000)]
RMEM = cute.nvgpu.warpgroup.OperandSource.RMEM


class OneCtaPerSm(hopper.HopperAssign):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.ctas_per_sm = 1
        self.stages = min(hopper.MAX_STAGES, hopper._ring_slots(self.D, 1, self.block_n, self.norms_in_acc))


class InlineProducer(hopper.HopperAssign):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.inline_producer = True


class RegisterPoints:
    """Mixed into a build: the points copied into registers once per point tile, the WGMMAs reading them there."""
    def _tiled_mma(self, dtype, points=RMEM):
        return super()._tiled_mma(dtype, points)

    def _points_arrived(self, k, x_state):
        # this thread's share of its warpgroup's points, once per point tile; then the buffer goes back
        cute.autovec_copy(k.thr_mma.partition_A(k.sx), k.frag_x)
        cute.nvgpu.warpgroup.fence()
        k.x_pipe.consumer_release(x_state)

    def _points_done(self, k, x_state):
        """Released when it arrived."""


class PointsInRegisters(RegisterPoints, OneCtaPerSm):
    pass


class InlinePointsInRegisters(RegisterPoints, InlineProducer):
    pass


BUILDS = {"library": (hopper.HopperAssign, None), "shared, 1 CTA/SM": (OneCtaPerSm, "wide"),
          "registers, 1 CTA/SM": (PointsInRegisters, "wide"),      # "wide": one wave, a CTA per SM
          "shared, 256 threads": (InlineProducer, None), "registers, 256 threads": (InlinePointsInRegisters, None)}


@functools.lru_cache(maxsize=None)
def compiled(name, D, dtype):
    cls, grid_of = BUILDS[name]
    return launcher(cls, D, dtype, variant="lazy_index", grid_of=grid_of)


def builds(N, D, dtype, names=tuple(BUILDS)):
    """{build name: fn(x, c, c_sq) -> out} for one shape, the library's first."""
    fns = {}
    for name in dict.fromkeys(("library", *names)):
        run, out = compiled(name, D, dtype), torch.empty(N, dtype=torch.int32, device="cuda")
        fns[name] = lambda x, c, c_sq, run=run, out=out: (run(x, c, c_sq, out), out)[1]
    return fns


TWINS = {"registers, 1 CTA/SM": "shared, 1 CTA/SM", "registers, 256 threads": "shared, 256 threads"}


def exact_sets(N, D, K, seed=0):
    """Small-integer points and centroids (`cases.small_integers`): exact dot products, many ties (the lowest index
    wins)."""
    gen = torch.Generator().manual_seed(seed)
    x, c = (cases.small_integers(rows, D, gen).cuda() for rows in (N, K))
    return [(x, c, reference.centroid_norms(c))]


def main(out_dir, names=tuple(BUILDS)):
    rows, clocks = [], []
    for N, D, K in EXACT:
        sets = exact_sets(N, D, K)
        x, c, c_sq = sets[0]
        want = reference.assign(x, c, c_sq)
        fns = builds(N, D, x.dtype, names)
        check(fns, sets)
        if not torch.equal(fns["library"](x, c, c_sq), want):
            raise SystemExit(f"{N} x {D} x {K}: the builds agree, but not with the reference")
        print(f"exact {N} x {D} x {K}: every build equals the reference", flush=True)
    for N, D, K in SHAPES:
        sets = bench.input_sets(N, D, K)
        fns = builds(N, D, sets[0][0].dtype, names)
        check(fns, sets)
        rows += timed_rows(fns, sets, "library", 10, against={k: v for k, v in TWINS.items() if v in fns}, N=N, D=D,
                           K=K)
        df = save(rows, f"{out_dir}/kmeans_points_in_registers.csv")
    for N, D, K in SUSTAINED:
        x, c, c_sq = bench.input_sets(N, D, K)[0]
        fns = builds(N, D, x.dtype, names)
        for turn, name in enumerate(list(fns)[1:] * 2):     # A B C D A B C D: every build but the library's
            run = functools.partial(fns[name], x, c, c_sq)
            clocks.append(dict(N=N, D=D, K=K, build=name, turn=turn,
                               **sustained(run, f"{out_dir}/smi.csv", 3.0, batch=10)))
        save(clocks, f"{out_dir}/kmeans_points_in_registers_clocks.csv")
    pd.set_option("display.width", 220)
    print(df[df.timing != "gpu"].pivot_table(index=["N", "D", "K", "timing"], columns=["contender", "vs"],
                                               values=["ratio", "ratio_lo", "ratio_hi"]).round(3).to_string())
    print(pd.DataFrame(clocks)[["N", "D", "K", "build", "us_per_call", "sm_mhz_median", "power_w_median"]].to_string())


if __name__ == "__main__":
    main(sys.argv[1], tuple(sys.argv[2:]) or tuple(BUILDS))     # optional: the builds to time beside the library's
