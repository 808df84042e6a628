"""Where does stream-K's time go at 4096^3? (scratch probe)

Times, interleaved, synced and back to back: torch.matmul; our kernel without stream-K; the stream-K build
with its default units; the stream-K build with every row whole (the build's own cost); and the stream-K build
with each tail item cut in two halves, all contributors first (one hand-over per item and no gain expected:
the cost of a hand-over).
    python tools/probes/probe_stream_k.py --rounds 6 > sk.csv
"""
import argparse
import sys
from unittest import mock

import torch

from gemm_kernels import bench as gb, hopper, waves
from workbook import launch, timing
from probe_gemm import back_to_back_ms


def halves(items, slots, k_blocks):
    full = items - items % slots
    half = k_blocks // 2
    tail = range(full, items)
    return full, tuple((waves.Segment(i, half, k_blocks),) for i in tail) + tuple((waves.Segment(i, 0, half),)
                                                                                 for i in tail)


UNITS = {"whole rows": lambda items, slots, k_blocks: (items, ()), "halves": halves}


def call_with(M, N, K, units=None):
    """A fresh _Call with stream-K forced on, its units from `UNITS[units]` (None: waves.stream_k)."""
    args = (M, N, K, None, None, "register", "balanced", hopper.DEFAULT_CLUSTER_M, hopper.band_rows_for(K), 0,
            True, True, False, True)
    if units is None:
        return hopper._prepare.__wrapped__(*args)
    with mock.patch.object(waves, "stream_k", UNITS[units]):
        return hopper._prepare.__wrapped__(*args)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="4096x4096x4096")
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args(argv)
    M, N, K = map(int, args.shape.split("x"))
    sets = gb.input_sets(M, N, K)
    calls = {"stream-k": call_with(M, N, K), **{f"stream-k {u}": call_with(M, N, K, u) for u in UNITS}}

    def ours(call):
        def fn(a, b):
            out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            hopper._launch(call, a, b, out, launch.stream_handle(0))
            return out
        return fn

    fns = {"torch": torch.matmul, "no stream-k": lambda a, b: hopper.gemm(a, b, stream_k=False),
           **{name: ours(c) for name, c in calls.items()}}
    want = torch.matmul(*sets[0]).float()
    for name, fn in fns.items():          # every contender computes the product
        got = fn(*sets[0]).float()
        assert ((got - want).norm() / want.norm()).item() < 1e-2, name
    print("shape,round,config,synced_ms,b2b_ms")
    for rnd in range(args.rounds):
        for name, fn in list(fns.items())[rnd % len(fns):] + list(fns.items())[:rnd % len(fns)]:
            synced = timing.bench(fn, sets).ms_median
            print(f"{M}x{N}x{K},{rnd},{name},{synced:.4f},{back_to_back_ms(fn, sets):.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
