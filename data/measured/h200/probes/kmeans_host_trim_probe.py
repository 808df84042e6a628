"""Probe: the pieces of an `assign(x, c, c_sq=c_sq)` call's host time that `host_pieces_probe.py` did not time,
and two cheaper forms.

An H100 measured 12.5 us of host per call at 65536 x 64 x 512 (a fresh output each call) and the synchronised
latency 11 us above the kernel (`kmeans_launch_gaps_probe.py`): the host's issue time is that excess. The earlier
pieces (`host_pieces_kmeans_e3855c3.txt`, an H200) already settle one candidate: torch's capture query took 0.75 us
against `launch.is_capturing`'s 0.98. Timed here with the same clock (`tools/host_cost.host_us`, the GPU drained
between chunks): `assign` into a fresh and a given output, the signature lookup (`kmeans_kernels._call`), the
output's allocation, `cuGraphLaunch` given the stream as an int against a CUstream made once, and a replay re-aimed
at another output (`Reaimable.aim`: cuGraphExecKernelNodeSetParams) against one that keeps its output.
    python kmeans_host_trim_probe.py OUT_DIR   (kmeans_host_trim_<commit>.csv)"""
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
from workbook import launch, records  # noqa: E402

N, D, K = 65536, 64, 512

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
    "cuGraphLaunch, int stream": lambda: launch.graph_launch(graph.exec, stream),
    "cuGraphLaunch, CUstream made once": lambda: cuda.cuGraphLaunch(graph.exec, stream_obj),
    "aim at another output + cuGraphLaunch": lambda: (reaim(), launch.graph_launch(graph.exec, stream)),
    "call.launch (replay, out given)": lambda: call.launch(x, c, c_sq, out),
}
rows = [dict(N=N, D=D, K=K, piece=name, us=host_us(fn, chunks=40, per_chunk=40)) for name, fn in pieces.items()]
graph.aim((c_sq.data_ptr(), out.data_ptr()))
assert torch.equal(kmeans_kernels.assign(x, c, c_sq=c_sq), kmeans_kernels.assign(x, c, c_sq=c_sq, out=out))
df = records.write_probe(pd.DataFrame(rows), f"{sys.argv[1]}/kmeans_host_trim_{records.provenance()['commit']}.csv")
print(df[["piece", "us"]].round(2).to_string(index=False))
