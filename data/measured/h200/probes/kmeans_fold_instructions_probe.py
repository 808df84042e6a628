"""Probe: two builds of `lazy_index` with fewer instructions per score, against the library's.

`lazy_index` starts each tile's accumulator at the tile's staged norms. A thread's two rows need the same norms;
the library reads each column pair once (an 8-byte load) and copies the pair into the second row's registers: 16
LDS.64 and 32 register moves per tile and thread. `SixteenByteLoads` has the producer stage every norm twice, in
the order of a thread's accumulator registers (`norms_layout`), so one 16-byte load fills four registers: 16 LDS.128
and no moves (1 KiB per ring slot instead of 512 bytes; the same ring depth at every D); at the K = 512 shapes the
same against `folded_norms`, which `auto` runs there. `LazyWide` is that on
`wide`'s 256-column tiles (one CTA per SM, its two warpgroups taking turns): a tile's vote, shuffles, compare and
WGMMA issue shared by twice the columns, 1.46-1.49 tile-block instructions per score against 1.91-2.0 (SASS). Their
answers are checked against the library's on every input set before they are timed.
CUPTI GPU time and both timings against the library's build (`workbook.timing.compare`); then, at two shapes, each
build back to back for 3 s, twice, taking turns, with the SM clock and the board power sampled
(`sustained_clocks.sustained`): the energy per call.
    python kmeans_fold_instructions_probe.py OUT_DIR
(its run: kmeans_fold_instructions_<commit>.csv and kmeans_fold_instructions_clocks_<commit>.csv)"""
import functools
import sys

import cutlass
import cutlass.cute as cute
import pandas as pd
import torch

from kmeans_ablation_probe import launcher
from kmeans_kernels import bench, hopper
from probe_rows import save, timed_rows
from sustained_clocks import sustained

SHAPES = [(65536, 64, 4096), (65536, 64, 16384), (65536, 128, 4096), (262144, 128, 16384), (1048576, 128, 4096)]
# where `auto` runs folded_norms (K < 4096): its build with 16-byte norm loads against the library's
SMALL_K = [(65536, 64, 512), (65536, 128, 512)]
SUSTAINED = [(262144, 128, 16384), (65536, 64, 16384)]


def norms_layout(block_n: int, stages: int):
    """A slot's norms in the order of a thread's accumulator registers: column pair p = 4g + q (8-column group g,
    lane q = lane % 4) as [h(2p), h(2p + 1), h(2p), h(2p + 1)], registers 4g to 4g + 3 (row 0's pair, then row 1's)
    of every thread with that q. Modes: (register of the four, q, g, slot)."""
    return cute.make_layout((4, 4, block_n // 8, stages), stride=(1, 4, 16, 2 * block_n))


class SixteenByteLoads(hopper.HopperAssign):
    @property
    def norm_words(self) -> int:
        """Every norm twice: the shared-memory words `norms_layout` spans at this ring depth and tile width."""
        return 2 * self.stages * self.block_n

    def _stage_norms(self, c_sq, sn, slot_index, tile, K, lane):
        staged = cute.make_tensor(sn.iterator, norms_layout(self.block_n, self.stages))
        first = tile * self.block_n
        for t in range(self.block_n // 32):
            c = lane + 32 * t
            norm = cutlass.Float32(-0.5) * c_sq[cutlass.min(first + c, K - 1)]
            norm = cutlass.Float32(cutlass.select_(first + c < K, norm, float("-inf")))
            for row in range(2):
                staged[2 * row + c % 2, (c % 8) // 2, c // 8, slot_index] = norm

    def _norms_into_acc(self, k, acc, slot_index):
        staged = cute.make_tensor(k.sn.iterator, norms_layout(self.block_n, self.stages))
        q = k.coords[hopper._flat_index(0, 0)][1] // 2      # the thread's column pair within each group
        groups = cute.make_tensor(acc.iterator, cute.make_layout((4, self.block_n // 8), stride=(1, 4)))
        cute.autovec_copy(staged[None, q, None, slot_index], groups)


class LazyWide(SixteenByteLoads):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.block_n = hopper.WIDE_BLOCK_N
        self.stages = hopper.stages_for(self.D, self.block_n, staged_norms=True)
        self.ctas_per_sm = hopper.ctas_per_sm(self.D, self.block_n, staged_norms=True)


BUILDS = {"row copies": hopper.HopperAssign, "16-byte loads": SixteenByteLoads, "256-wide": LazyWide}
GRID_OF = {LazyWide: "wide"}      # one CTA per SM: one wave of persistent CTAs, as the library runs `wide`


@functools.lru_cache(maxsize=None)
def compiled(cls, D, dtype, variant):
    return launcher(cls, D, dtype, variant=variant, grid_of=GRID_OF.get(cls))


def builds(N, D, dtype, variant="lazy_index", names=tuple(BUILDS)):
    """{build name: fn(x, c, c_sq) -> out} for one shape."""
    fns = {}
    for name in names:
        run, out = compiled(BUILDS[name], D, dtype, variant), torch.empty(N, dtype=torch.int32, device="cuda")
        fns[name] = lambda x, c, c_sq, run=run, out=out: (run(x, c, c_sq, out), out)[1]
    return fns


def check(fns, sets):
    """Every build's answers equal the library's on every input set (outputs poisoned first)."""
    for x, c, c_sq in sets:
        answers = []
        for fn in fns.values():
            fn(x, c, c_sq).fill_(-7)
            answers.append(fn(x, c, c_sq).clone())
        for name, answer in zip(fns, answers):
            if not torch.equal(answer, answers[0]):
                raise SystemExit(f"{name}: {(answer != answers[0]).sum().item()} rows differ from {list(fns)[0]}")


def main(out_dir):
    rows, clocks = [], []
    runs = [(shape, "lazy_index", tuple(BUILDS)) for shape in SHAPES]
    runs += [(shape, "folded_norms", ("row copies", "16-byte loads")) for shape in SMALL_K]
    for (N, D, K), variant, names in runs:
        sets = bench.input_sets(N, D, K)
        fns = builds(N, D, sets[0][0].dtype, variant, names)
        check(fns, sets)
        rows += timed_rows(fns, sets, "row copies", 10, N=N, D=D, K=K, variant=variant)
        df = save(rows, f"{out_dir}/kmeans_fold_instructions.csv")
    for N, D, K in SUSTAINED:
        x, c, c_sq = bench.input_sets(N, D, K)[0]
        fns = builds(N, D, x.dtype)
        for turn, name in enumerate(list(fns) * 2):     # A B A B: two sustained runs each, taking turns
            run = functools.partial(fns[name], x, c, c_sq)
            clocks.append(dict(N=N, D=D, K=K, build=name, turn=turn,
                               **sustained(run, f"{out_dir}/smi.csv", 3.0, batch=10)))
        save(clocks, f"{out_dir}/kmeans_fold_instructions_clocks.csv")
    pd.set_option("display.width", 220)
    print(df[df.timing != "gpu"].pivot_table(index=["variant", "N", "D", "K", "timing"], columns="contender",
                                               values=["ratio", "ratio_lo", "ratio_hi"]).round(3).to_string())
    print(pd.DataFrame(clocks)[["N", "D", "K", "build", "us_per_call", "sm_mhz_median", "power_w_median"]].to_string())


if __name__ == "__main__":
    main(sys.argv[1])
