"""Probe: split-K whose pieces start together, against stream-K's staggered units, at the few-tile K-heavy shapes.

The traces of `gemm_kheavy_trace_probe.py` (an H100) put the rule's `128 stream-k cluster2x2` at 1024 x 1024 x 8192
at the tensor pipe's pace only in its later segments: the first ones, which run while every operand still comes
from DRAM, took 1.2-1.3x longer a K-block, and at K = 32768 (A and B 134 MB, past the 50 MB L2) every segment took
1.6-1.7x. Stream-K cuts the items' K-blocks, laid end to end, into one unit per slot, so the units start at
staggered K-blocks (8, 17, 25, ... into their items) and the items that share a panel of A or B read it at different
times: each such K-block comes from DRAM once per reader unless the L2 still holds it. Where every item splits into
the same pieces, [0, K/2) and [K/2, K), all pieces start at once and the items sharing a panel read each K-block of
it together. Pairs along M (`128 stream-k cluster2`: 128 x 128 tiles, B shared) make 32 items at 1024 x 1024 and at
512 x 2048, 64 halves for 66 pair slots: the same work list builder (`hopper_worklist.work_rows`) given 64 slots
cuts them so. Here that build (`aligned halves`) against the rule's pick, the candidate as planned (66 staggered
units), the one-wave `64x128 uniform cluster2` (whole K per CTA, L2-bound at 59-64 % of the peak) and
torch.matmul, exact on small integers first, then timed taking turns (`probe_rows.timed_rows`); and one launch of
each under ncu at 1024 x 1024 x 32768 for DRAM bytes and L2 sectors.

The second round (`library`), after `Options.split_k` and the rule's `split_k_instead` landed: `gemm(a, b)` as the rule
now runs it against the rule's pick as named and torch.matmul, at the four shapes above and three where the split
cuts each item into quarters (16 items for 66 pair slots), which the first round did not time.

    python gemm_aligned_split_probe.py OUT_DIR           (gemm_aligned_split_<commit>.csv,
                                                         ncu_aligned_split_<commit>.txt)
    python gemm_aligned_split_probe.py OUT_DIR library   (gemm_aligned_split_library_<commit>.csv)"""
import dataclasses
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from gemm_kernels import configs, hopper_host, hopper_options, rule  # noqa: E402
from gemm_kernels.hopper_worklist import band_rows_for, work_rows  # noqa: E402
from workbook import ncu  # noqa: E402

SHAPES = [(1024, 1024, 8192), (1024, 1024, 16384), (1024, 1024, 32768), (512, 2048, 16384)]
PAIRS = "128 stream-k cluster2"
METRICS = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
           "lts__t_sectors_srcunit_tex_op_read.sum", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"]


def aligned_halves(M: int, N: int, K: int):
    """`128 stream-k cluster2`'s call with every item cut at K / 2: its work list built for 2 x items slots."""
    base = hopper_host._call_for(M, N, K, torch.cuda.current_device(), configs.HOPPER_CANDIDATES[PAIRS])
    cfg, items = base.cfg, base.plan.items
    slots = 2 * len(items)
    assert slots <= base.plan.slots, (M, N, K, len(items), base.plan.slots)
    k_blocks = -(-K // hopper_options.TILE_K)
    rows, partial_slots = work_rows(items, band_rows_for(K, cfg.tile_m), slots, k_blocks, True, cfg.tile_m)
    assert len(rows) == slots and all(r[4] in (k_blocks // 2, k_blocks - k_blocks // 2) for r in rows), rows[:3]
    work = torch.tensor(rows, dtype=torch.int32, device=base.work.device)
    sizes = base.sizes[:3] + (len(rows), len(rows) * cfg.cluster_size)
    return dataclasses.replace(base, work=work, sizes=sizes, partial_slots=partial_slots, scratches={}, tails={})


def contenders(M: int, N: int, K: int) -> dict:
    pick = rule.choose(M, N, K)
    call = aligned_halves(M, N, K)

    def halves(a, b):
        out = torch.empty_like(call.out_like)
        hopper_host._launch(call, a, b, out, torch.cuda.current_stream().cuda_stream)
        return out
    fns = {"torch.matmul": torch.matmul, f"pick: {pick}": lambda a, b: hopper_host.gemm(a, b),
           "aligned halves": halves}
    for name in (PAIRS, "64x128 uniform cluster2"):
        if name != pick:
            o = hopper_options.one_wave(configs.HOPPER_CANDIDATES[name], M, N)
            fns[name] = lambda a, b, o=o: hopper_host.gemm(a, b, o)
    return fns


def profile() -> None:
    """The child under ncu: one launch of each contender at 1024 x 1024 x 32768, after warm-up."""
    M, N, K = 1024, 1024, 32768
    a = torch.randn(M, K, device="cuda").bfloat16()
    b = torch.randn(K, N, device="cuda").bfloat16()
    ncu.profile_each([(f"{M}x{N}x{K} {name}", lambda fn=fn: fn(a, b)) for name, fn in contenders(M, N, K).items()],
                     warmup=2)


LIBRARY_SHAPES = SHAPES + [(512, 1024, 16384), (1024, 512, 16384), (256, 2048, 16384)]


def library(M: int, N: int, K: int) -> dict:
    """torch.matmul, the rule's pick as named (in one wave where that applies) and gemm(a, b) as the rule runs it."""
    pick = rule.choose(M, N, K)
    named = hopper_options.one_wave(configs.HOPPER_CANDIDATES[pick], M, N)
    assert rule.options_for(M, N, K).split_k and not named.split_k, (M, N, K, pick)
    return {"torch.matmul": torch.matmul, f"pick: {pick}": lambda a, b: hopper_host.gemm(a, b, named),
            "gemm(a, b)": lambda a, b: hopper_host.gemm(a, b)}


def main(out_dir: str, part: str = "first") -> None:
    from probe_rows import save, timed_rows
    commit = os.environ.get("WORKBOOK_COMMIT", "local")
    g = torch.Generator(device="cuda").manual_seed(31)
    rows = []
    for M, N, K in (LIBRARY_SHAPES if part == "library" else SHAPES):
        fns = library(M, N, K) if part == "library" else contenders(M, N, K)
        ints = [torch.randint(-2, 3, s, device="cuda", generator=g).bfloat16() for s in ((M, K), (K, N))]
        want = torch.matmul(ints[0].float(), ints[1].float()).bfloat16()
        for f, fn in fns.items():
            if f != "torch.matmul":
                for _ in range(3):   # poisoned outputs: every launch writes all of C
                    assert torch.equal(fn(*ints), want), (M, N, K, f)
        sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
                 torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(3)]
        pick = next(f for f in fns if f.startswith("pick: "))
        rows += timed_rows(fns, sets, pick, 10, M=M, N=N, K=K)
        save(rows, f"{out_dir}/gemm_aligned_split{'_library' if part == 'library' else ''}_{commit}.csv")
    if part == "library":
        return
    out = Path(out_dir) / f"ncu_aligned_split_{commit}.txt"
    ncu.run_child(__file__, ["--inside"], METRICS, out)
    import pandas as pd
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.float_format", "{:.4g}".format):
        print(ncu.read(out).drop(columns=["kernel"]).set_index("contender").to_string())


if __name__ == "__main__":
    if sys.argv[1] == "--inside":
        profile()
    else:
        main(*sys.argv[1:])
