"""Probe: the pieces of an `assign(x, c, c_sq=c_sq)` call's host time, and cheaper forms of three of them.

An H100 measured 12.5 us of host per call at 65536 x 64 x 512 (a fresh output each call) and the synchronised
latency 11 us above the kernel (`kmeans_launch_gaps_probe.py`): the host's issue time is that excess. Each piece is
timed alone over many calls (time.perf_counter, the GPU kept busy by the replays themselves), beside the form that
might replace it: `launch.is_capturing` (cuda-python's cuStreamIsCapturing) against
`torch.cuda.is_current_stream_capturing`; `cuGraphLaunch` given the stream as an int against a CUstream made once;
the graph re-aimed at a new output (`Reaimable.aim`: cuGraphExecKernelNodeSetParams) against a replay that keeps
its output.
    python kmeans_host_trim_probe.py OUT_DIR   (kmeans_host_trim_<commit>.csv)"""
import sys
import time

import cuda.bindings.driver as cuda
import pandas as pd
import torch

import kmeans_kernels
from kmeans_kernels import bench, hopper
from workbook import launch, records

N, D, K = 65536, 64, 512
CALLS = 300     # launches queue up behind a 14.5 us kernel: stay well under the driver's queue depth


def per_call_us(fn, calls=CALLS):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    us = (time.perf_counter() - t) / calls * 1e6
    torch.cuda.synchronize()
    return us


x, c, c_sq = bench.input_sets(N, D, K)[0]
out = torch.empty(N, dtype=torch.int32, device="cuda")
outs = [torch.empty(N, dtype=torch.int32, device="cuda") for _ in range(2)]
for _ in range(launch.CAPTURE_AFTER + 2):
    kmeans_kernels.assign(x, c, c_sq=c_sq, out=out)
cache = hopper._launches(hopper.auto_variant(N, D, K), D, torch.bfloat16, 0, False)
graph = next(iter(cache._graphed.values()))
assert isinstance(graph, launch.Reaimable), type(graph)
stream = launch.stream_handle(0)
stream_obj = cuda.CUstream(stream)
flip = [0]


def reaim():
    flip[0] ^= 1
    graph.aim((c_sq.data_ptr(), outs[flip[0]].data_ptr()))


call = kmeans_kernels._call(x, c, c_sq, None, "auto")
pieces = {
    "assign, new out": lambda: kmeans_kernels.assign(x, c, c_sq=c_sq),
    "assign, out given": lambda: kmeans_kernels.assign(x, c, c_sq=c_sq, out=out),
    "_call (signature seen)": lambda: kmeans_kernels._call(x, c, c_sq, None, "auto"),
    "torch.empty_like(out_like)": lambda: torch.empty_like(call.out_like),
    "stream_handle": lambda: launch.stream_handle(0),
    "launch.is_capturing": lambda: launch.is_capturing(stream),
    "torch.cuda.is_current_stream_capturing": torch.cuda.is_current_stream_capturing,
    "cuGraphLaunch, int stream": lambda: launch.graph_launch(graph.exec, stream),
    "cuGraphLaunch, CUstream made once": lambda: cuda.cuGraphLaunch(graph.exec, stream_obj),
    "aim at another output + cuGraphLaunch": lambda: (reaim(), launch.graph_launch(graph.exec, stream)),
    "call.launch (replay, out given)": lambda: call.launch(x, c, c_sq, out),
}
rows = []
for rnd in range(5):
    for name, fn in pieces.items():
        rows.append(dict(N=N, D=D, K=K, piece=name, round=rnd, us=per_call_us(fn)))
graph.aim((c_sq.data_ptr(), out.data_ptr()))
assert torch.equal(kmeans_kernels.assign(x, c, c_sq=c_sq), kmeans_kernels.assign(x, c, c_sq=c_sq, out=out))
df = records.write_probe(pd.DataFrame(rows), f"{sys.argv[1]}/kmeans_host_trim_{records.provenance()['commit']}.csv")
print(df.groupby("piece", sort=False).us.median().round(2).to_string())
