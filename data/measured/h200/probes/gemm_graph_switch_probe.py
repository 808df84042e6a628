"""Probe: can our GEMM keep the 1.4 us gap between kernels when consecutive calls replay different graphs?

`gemm_gap_state_abe860f.csv` and `gemm_gap_state_reaim_28ebafa.csv` (an H100): back to back, the GPU idles 1.4 us
between our kernels when every call replays one graph (re-aimed at a new output or not) or launches directly, as
between cuBLAS's; 1.7-2.7 us when consecutive calls replay different graphs (three input sets in turn, as every
benchmark here calls, each set its own graph). Ways tried here, each on three input sets in turn, each set's output
given (so that no way re-aims an output):
  * `per-set graphs`: the library as it stands (`gemm(a, b, out=)`);
  * `per-set graphs, uploaded`: the same, each graph uploaded to the launch stream once it is instantiated
    (`cuGraphUpload`), in case a launch of a graph not launched last pays an upload;
  * `one graph, parameters set`: the three sets' graphs captured as the library does, then only the first one
    launched, its kernel node handed the set's parameters (`cuGraphExecKernelNodeSetParams`) whenever the set
    changes: one graph on the GPU, a driver call more on the host;
  * `no graphs`: a direct launch from a patched template every call.
Each way: one CUPTI trace of 60 calls back to back (kernel and gap medians), the host's issue time per call
(`tools/host_cost.host_us`), then both timings against `per-set graphs` with 95 % intervals (`timing.compare`).

    python gemm_graph_switch_probe.py OUT_DIR   (gemm_graph_switch_<commit>.csv)"""
import dataclasses
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

from gemm_kernels import gemm, hopper_host, rule  # noqa: E402
from probe_rows import as_one_graph, gemm_sets, kernel_spans, timing_columns  # noqa: E402
from workbook import launch, records, timing  # noqa: E402

SHAPES = [(4096, 2048, 1024), (128, 14336, 4096), (1024, 2048, 8192), (256, 8192, 4096)]


def trace(fn, sets, calls=60):
    """Kernel and gap medians (us) over `calls` calls back to back (`probe_rows.kernel_spans`)."""
    ks = kernel_spans(fn, sets, calls)
    return dict(kernel_us=statistics.median(e - s for s, e in ks),
                gap_us=statistics.median(ks[i + 1][0] - ks[i][1] for i in range(len(ks) - 1)))


def own_call(M, N, K, graphs=True):
    """The rule's call for this shape with a launch cache of its own (graphs on or off)."""
    call = hopper_host._prepare(M, N, K, 0, rule.options_for(M, N, K), torch.bfloat16)
    cache = hopper_host._launches.__wrapped__(call.cfg, 0)
    cache.graphs = graphs
    return dataclasses.replace(call, launches=cache, scratches={}, tails={})


def launcher(call, outs):
    def run(a, b):
        hopper_host._launch(call, a, b, outs[id(a)], launch.stream_handle(0))
        return outs[id(a)]
    return run


def uploading(call, outs):
    """`launcher`, its cache's graphs uploaded to the launch stream as they are made."""
    cache = call.launches
    capture = cache._capture

    def capture_and_upload(full_key, key, make_args):
        graph = capture(full_key, key, make_args)
        exec_ = graph.exec if isinstance(graph, launch.Reaimable) else graph
        launch._check(cuda.cuGraphUpload(exec_, launch.stream_handle(0)), "cuGraphUpload")
        return graph
    cache._capture = capture_and_upload
    return launcher(call, outs)


def one_graph(call, outs, sets):
    """The sets' graphs captured through `call`'s cache, then the first set's launched for every set, its node
    handed the set's parameters where the set changes."""
    call.launches._reaiming = True     # a staged epilogue's graphs too: their node and parameters kept (no slots)
    run = launcher(call, outs)
    for _ in range(launch.CAPTURE_AFTER + 1):
        for a, b in sets:
            run(a, b)
    graphs = list(call.launches._graphed.values())
    assert len(graphs) == len(sets) and all(isinstance(g, launch.Reaimable) for g in graphs), graphs
    by_set = {id(a): g for (a, _), g in zip(sets, graphs)}
    launch_as = as_one_graph(graphs, launch.stream_handle(0))

    def swap(a, b, cache=call.launches):     # the cache kept alive: it holds the compiled module the graphs run
        launch_as(by_set[id(a)])
        return outs[id(a)]
    return swap


def main(out_dir: str) -> None:
    g = torch.Generator(device="cuda").manual_seed(43)
    rows = []
    for M, N, K in SHAPES:
        sets = gemm_sets(M, N, K, g)
        outs = {id(a): torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for a, _ in sets}
        fns = {"per-set graphs": lambda a, b: gemm(a, b, out=outs[id(a)]),
               "per-set graphs, uploaded": uploading(own_call(M, N, K), outs),
               "one graph, parameters set": one_graph(own_call(M, N, K), outs, sets),
               "no graphs": launcher(own_call(M, N, K, graphs=False), outs),
               "torch.matmul": torch.matmul}
        for f, fn in fns.items():           # each equal to gemm(a, b) on every set, past the captures
            for _ in range(launch.CAPTURE_AFTER + 2):
                for a, b in sets:
                    fn(a, b)
            for a, b in sets:
                want = gemm(a, b)
                assert f == "torch.matmul" or torch.equal(fn(a, b), want), (M, N, K, f)
        cmp = timing.compare(fns, sets, baseline="per-set graphs", rounds=10, calls=20)
        for f, fn in fns.items():
            row = dict(M=M, N=N, K=K, pick=rule.choose(M, N, K), way=f, **trace(fn, sets),
                       host_us=host_us(lambda fn=fn, turn=itertools.cycle(sets): fn(*next(turn)), chunks=20,
                                       per_chunk=21))
            row.update(timing_columns(cmp, f))
            rows.append(row)
        df = records.write_probe(pd.DataFrame(rows), f"{out_dir}/gemm_graph_switch_{records.provenance()['commit']}.csv")
        print(M, N, K, flush=True)
    with pd.option_context("display.width", 250, "display.float_format", "{:.3g}".format):
        print(df[["M", "N", "K", "way", "kernel_us", "gap_us", "host_us", "kernel_us", "kernel", "kernel_lo",
                  "kernel_hi", "latency", "latency_lo", "latency_hi"]].to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1])
