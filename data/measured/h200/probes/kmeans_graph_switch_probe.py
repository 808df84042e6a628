"""Probe: does the k-means assignment pay the GEMM's graph switch back to back, and does one graph with its parameters
set take it back?

The GEMM's probes (`gemm_gap_state_abe860f.csv`, `gemm_graph_switch_bd65dcd.csv`, an H100): consecutive calls that
replay different CUDA graphs idle 1.5-2.7 us between kernels, one graph (re-aimed or handed another set's
parameters) 1.4-1.5 us. The floor bench rotates three input sets too, and the launch-gaps probe
(`kmeans_launch_gaps_4d519cf.csv`) read 2.2-2.4 us between `assign` kernels at D = 128 and 256 (cuBLAS 1.6). Ways,
each on the floor bench's three input sets (`bench.input_sets`) in turn, each set's output given:
  * `assign(out=)`: the call as users make it;
  * `per-set graphs`: the backend's launch (`hopper.launcher`), a graph per set as `assign` replays them;
  * `one graph, parameters set`: the sets' graphs captured the same way, then only one launched, its kernel node
    handed the set's parameters (`cuGraphExecKernelNodeSetParams`) whenever the set changes;
  * `x @ c.T (cuBLAS)`: a control for the gap between directly launched kernels.
Each: one CUPTI trace of 60 calls back to back (kernel and gap medians), the host's issue time per call
(`tools/host_cost.host_us`), both timings against `per-set graphs` with 95 % intervals (`timing.compare`, 10 rounds).

    python kmeans_graph_switch_probe.py OUT_DIR   (kmeans_graph_switch_<commit>.csv)"""
import itertools
import statistics
import sys
from pathlib import Path

import cuda.bindings.driver as cuda
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

from host_cost import host_us  # noqa: E402

import kmeans_kernels  # noqa: E402
from kmeans_kernels import bench, hopper  # noqa: E402
from probe_rows import as_one_graph, kernel_spans, timing_columns  # noqa: E402
from workbook import launch, records, timing  # noqa: E402

SHAPES = [(65536, 64, 512), (65536, 128, 512), (65536, 256, 512), (65536, 128, 4096)]


def one_graph(variant, N, D, K, sets, outs):
    """`hopper.launcher` behind a launch cache of its own until each set has its graph, then the first graph launched
    for every set, its node handed the set's parameters (found by the set's x address) where the set changes."""
    cache = hopper._launches.__wrapped__(variant, D, torch.bfloat16, 0, False)
    ctas = hopper.grid_cap(variant, D, 0)
    stream = launch.stream_handle(0)
    for _ in range(launch.CAPTURE_AFTER + 1):
        for x, c, c_sq in sets:
            addrs = (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), outs[id(x)].data_ptr(), N, K, ctas)
            cache(addrs, lambda s, addrs=addrs: hopper._args(torch.bfloat16, *addrs, cuda.CUstream(s)), stream)
    by_x = {full_key[0][0]: g for full_key, g in cache._graphed.items()}
    assert len(by_x) == len(sets) and all(isinstance(g, launch.Reaimable) for g in by_x.values()), by_x
    for x, c, c_sq in sets:         # every graph aimed at its set's c_sq and output
        by_x[x.data_ptr()].aim((c_sq.data_ptr(), outs[id(x)].data_ptr()))
    launch_as = as_one_graph(list(by_x.values()), stream)

    def swap(x, c, c_sq, cache=cache):      # the cache kept alive: it holds the compiled module the graphs run
        launch_as(by_x[x.data_ptr()])
        return outs[id(x)]
    return swap


def trace(fn, sets, calls=60):
    ks = kernel_spans(fn, sets, calls)
    return dict(kernel_us=statistics.median(e - s for s, e in ks),
                gap_us=statistics.median(ks[i + 1][0] - ks[i][1] for i in range(len(ks) - 1)))


def main(out_dir: str) -> None:
    rows = []
    for N, D, K in SHAPES:
        sets = bench.input_sets(N, D, K)
        outs = {id(x): torch.empty(N, dtype=torch.int32, device="cuda") for x, _, _ in sets}
        variant = hopper.auto_variant(N, D, K)
        per_set = hopper.launcher(variant, N, D, K, torch.bfloat16, 0)

        def per_set_graphs(x, c, c_sq):
            per_set(x, c, c_sq, outs[id(x)])
            return outs[id(x)]
        fns = {"assign(out=)": lambda x, c, c_sq: kmeans_kernels.assign(x, c, c_sq=c_sq, out=outs[id(x)]),
               "per-set graphs": per_set_graphs,
               "one graph, parameters set": one_graph(variant, N, D, K, sets, outs),
               "x @ c.T (cuBLAS)": lambda x, c, c_sq: x @ c.T}
        for f, fn in fns.items():
            if f != "x @ c.T (cuBLAS)":
                for x, c, c_sq in sets:
                    want = kmeans_kernels.assign(x, c, c_sq=c_sq).clone()
                    assert torch.equal(fn(x, c, c_sq), want), (N, D, K, f)
        cmp = timing.compare(fns, sets, baseline="per-set graphs", rounds=10, calls=20)
        for f, fn in fns.items():
            row = dict(N=N, D=D, K=K, variant=variant, way=f, **trace(fn, sets),
                       host_us=host_us(lambda fn=fn, turn=itertools.cycle(sets): fn(*next(turn)), chunks=20,
                                       per_chunk=21))
            row.update(timing_columns(cmp, f))
            rows.append(row)
        df = records.write_probe(pd.DataFrame(rows), f"{out_dir}/kmeans_graph_switch_{records.provenance()['commit']}.csv")
        print(N, D, K, flush=True)
    with pd.option_context("display.width", 250, "display.float_format", "{:.3g}".format):
        print(df[["N", "D", "K", "way", "kernel_us", "gap_us", "host_us", "kernel", "kernel_lo", "kernel_hi",
                  "latency", "latency_lo", "latency_hi"]].to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1])
