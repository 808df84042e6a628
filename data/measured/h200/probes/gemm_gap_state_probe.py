"""Probe: which state of the process gives our GEMM a 1.5 us or a 2.4 us idle gap between kernels back to back?

`gemm_launch_gaps_2337131.csv` (an H100): cuBLAS's kernels idle 1.4-1.5 us between each other at seven shapes; ours
1.5 or 2.2-2.5 us, the two values alternating from one traced contender to the next, so that the high gap cost
about 1 us a call (4096 x 2048 x 1024: 1.020 of torch.matmul back to back against 0.996). Here the rule's pick is
traced in turn under each way a call can reach the GPU, each trace 60 calls back to back (CUPTI), and the launch
cache's counts over the trace say which path the calls took (a graph replay, a direct launch from a template):
  * `new out, 3 sets`: gemm(a, b) on three input sets in turn, as the benchmarks call it (twice in a row);
  * `out given, 3 sets`: one output per input set, passed as `out=`;
  * `new out, 1 set` and `out given, 1 set`: one input set;
  * `no graphs`: the same build behind a launch cache of its own with graphs off (a template launch every call).
Each trace also counts the distinct output addresses its calls got, and the gaps' 10th and 90th percentiles show
whether one trace mixes the two gaps.

    python gemm_gap_state_probe.py OUT_DIR         (gemm_gap_state_<commit>.csv)
    python gemm_gap_state_probe.py OUT_DIR reaim   (gemm_gap_state_reaim_<commit>.csv): one input set, its graph
        re-aimed every call at one of two given outputs, or at a new output kept alive (a new address each call)"""
import dataclasses
import statistics
import sys
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from gemm_kernels import gemm, hopper_host, rule  # noqa: E402
from probe_rows import kernel_spans  # noqa: E402
from workbook import launch, records  # noqa: E402

SHAPES = [(4096, 2048, 1024), (128, 14336, 4096), (1024, 2048, 8192)]
CALLS = 60


def quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def trace(fn, sets, counts):
    """One trace of CALLS calls back to back (`probe_rows.kernel_spans`): the kernels' and the gaps' readings, the
    launch cache's counts over it and the distinct output addresses."""
    before = dict(counts)
    outs = set()
    ks = kernel_spans(lambda a, b: outs.add(fn(a, b).data_ptr()), sets, CALLS)
    gaps = [ks[i + 1][0] - ks[i][1] for i in range(len(ks) - 1)]
    return dict(kernel_us=statistics.median(e - s for s, e in ks), gap_us=statistics.median(gaps),
                gap_p10_us=quantile(gaps, 0.1), gap_p90_us=quantile(gaps, 0.9), out_addresses=len(outs),
                **{k: counts[k] - before[k] for k in counts})


def without_graphs(M, N, K):
    """gemm(a, b) as the rule runs it, behind a launch cache of its own with graphs off, and that cache's counts."""
    call = hopper_host._prepare(M, N, K, 0, rule.options_for(M, N, K), torch.bfloat16)
    cache = hopper_host._launches.__wrapped__(call.cfg, 0)
    cache.graphs = False
    call = dataclasses.replace(call, launches=cache, scratches={}, tails={})

    def run(a, b):
        out = torch.empty_like(call.out_like)
        hopper_host._launch(call, a, b, out, launch.stream_handle(0))
        return out
    return run, cache.counts


def alternating(M, N):
    """gemm(a, b) into one of two outputs in turn."""
    pair, turn = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in range(2)], [0]

    def run(a, b):
        turn[0] += 1
        return gemm(a, b, out=pair[turn[0] % 2])
    return run


def keeping(keep=80):
    """gemm(a, b) into a new output, the last `keep` kept alive so that each call's output has a new address."""
    kept = []

    def run(a, b):
        kept.append(gemm(a, b))
        del kept[:-keep]
        return kept[-1]
    return run


def main(out_dir: str, part: str = "ways") -> None:
    g = torch.Generator(device="cuda").manual_seed(41)
    rows = []
    for M, N, K in SHAPES:
        sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
                 torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(3)]
        outs = {id(a): torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for a, _ in sets}
        want = gemm(*sets[0])
        counts = hopper_host._call_for(M, N, K, 0).launches.counts
        plain, plain_counts = without_graphs(M, N, K)
        assert torch.equal(plain(*sets[0]), want)
        ways = [("new out, 3 sets", gemm, sets, counts), ("new out, 3 sets", gemm, sets, counts),
                ("out given, 3 sets", lambda a, b: gemm(a, b, out=outs[id(a)]), sets, counts),
                ("new out, 1 set", gemm, sets[:1], counts),
                ("out given, 1 set", lambda a, b: gemm(a, b, out=outs[id(a)]), sets[:1], counts),
                ("no graphs", plain, sets, plain_counts), ("new out, 3 sets", gemm, sets, counts)]
        if part == "reaim":   # one graph re-aimed at another output every call (register epilogue), or two graphs
            ways = [("new out, 1 set", gemm, sets[:1], counts),
                    ("out alternating, 1 set", alternating(M, N), sets[:1], counts),
                    ("new out kept, 1 set", keeping(), sets[:1], counts),
                    ("new out, 3 sets", gemm, sets, counts)]
        for turn, (way, fn, s, c) in enumerate(ways):
            for i in range(12):               # warm: past the capture of each set, whichever way it comes
                fn(*s[i % len(s)])
            rows.append(dict(M=M, N=N, K=K, pick=rule.choose(M, N, K), turn=turn, way=way, **trace(fn, s, c)))
            print(rows[-1], flush=True)
        df = records.write_probe(pd.DataFrame(rows), f"{out_dir}/gemm_gap_state{'_reaim' if part == 'reaim' else ''}_{records.provenance()['commit']}.csv")
    with pd.option_context("display.width", 250, "display.float_format", "{:.3g}".format):
        print(df[["M", "N", "K", "turn", "way", "kernel_us", "gap_us", "gap_p10_us", "gap_p90_us", "out_addresses",
                  "first", "captured", "replayed", "direct"]].to_string(index=False))


if __name__ == "__main__":
    main(*sys.argv[1:])
