"""Does the configuration or the order of timing decide the GEMM's per-call number? (scratch probe)

Times torch.matmul and several configurations of ours *interleaved*, three rounds, synced (the seeds' method)
and back to back, so that clock drift between consecutive measurements cannot pose as a difference.
    python tools/probes/probe_gemm_order.py > order.csv
    python tools/probes/probe_gemm_order.py --shapes 8192x8192x8192 --configs torch default "uniform c2 band8" --rounds 5
"""
import argparse
import sys

import torch

from gemm_kernels import bench as gb, hopper
from workbook import launch, timing
from probe_gemm import back_to_back_ms

CONFIGS = {
    "torch": None,
    "default": {},
    "plain register": dict(defer_epilogue=False),
    "deferred": dict(defer_epilogue=True, stream_k=False),
    "no stream-k": dict(stream_k=False),
    "stream-k": dict(stream_k=True),
    "deferred stream-k": dict(defer_epilogue=True, stream_k=True),
    "uniform c1 band1": dict(schedule="uniform", cluster_m=1, band_rows=1),
    "uniform c1 band8": dict(schedule="uniform", cluster_m=1, band_rows=8),
    "uniform c2 band1": dict(schedule="uniform", cluster_m=2, band_rows=1),
    "balanced c2 band1": dict(schedule="balanced", cluster_m=2, band_rows=1),
    "uniform c2 band8": dict(schedule="uniform", cluster_m=2, band_rows=8),
    "uniform": dict(schedule="uniform"),
    "band8": dict(band_rows=8),
    "band16": dict(band_rows=16),
    "static band8": dict(dynamic=False, band_rows=8),
    "static band16": dict(dynamic=False, band_rows=16),
    "nonpersistent band8": dict(persistent=False, band_rows=8),
    "nonpersistent band16": dict(persistent=False, band_rows=16),
    # the balanced plan's narrow widths: 64-column steps (before session 6), 16-column steps, one width
    "narrow64": dict(narrow_ns=(192, 128)),
    "narrow16": dict(narrow_ns=(240, 224, 192, 128)),
    "narrow240": dict(narrow_ns=(240,)),
    # kernel variants gemm() does not expose: both resolved once, launched the same way (`launched`)
    "launch default": dict(variant={}),
    "launch deferred": dict(defer_epilogue=True, variant={}),
}


def launched(M, N, K, kw):
    """A call resolved once outside the timed function, launched like gemm() does (out allocated per call)."""
    call = hopper._call_for(M, N, K, 0, **kw)
    stream = launch.stream_handle(0)

    def fn(a, b):
        out = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
        hopper._launch(call, a, b, out, stream)
        return out
    return fn


SHAPES = ("4096x4096x4096", "2048x5120x8192", "2560x7168x8192", "2048x6656x8192")


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", default=SHAPES)
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    print("shape,round,config,synced_ms,b2b_ms")
    for M, N, K in (map(int, s.split("x")) for s in args.shapes):
        sets = gb.input_sets(M, N, K)
        fns = {name: torch.matmul if CONFIGS[name] is None else
               launched(M, N, K, CONFIGS[name]) if "variant" in CONFIGS[name] else
               (lambda a, b, kw=CONFIGS[name]: hopper.gemm(a, b, **kw))
               for name in args.configs}
        for rnd in range(args.rounds):
            for name, fn in list(fns.items())[rnd % len(fns):] + list(fns.items())[:rnd % len(fns)]:
                synced = timing.bench(fn, sets).ms_median
                print(f"{M}x{N}x{K},{rnd},{name},{synced:.4f},{back_to_back_ms(fn, sets):.4f}", flush=True)
        del sets
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
