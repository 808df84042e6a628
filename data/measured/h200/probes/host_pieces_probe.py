"""Host us per call of assign()'s pieces at 65536 x 64 x 512 (run on the H200 from the repository root; output: host_pieces_kmeans_e3855c3.txt)."""
import sys, torch
sys.path.insert(0, "tools")
from host_cost import host_us
import kmeans_kernels
from kmeans_kernels import hopper, bench
from workbook import launch
N, D, K = 65536, 64, 512
x, c, c_sq = bench.input_sets(N, D, K)[0]
out = torch.empty(N, dtype=torch.int32, device="cuda")
v = hopper.auto_variant(N, D, K)
for _ in range(20):
    kmeans_kernels.assign(x, c, c_sq=c_sq, out=out)
torch.cuda.synchronize()
cache = hopper._launches(v, D, x.dtype, 0)
stream = launch.stream_handle(0)
addrs = (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr(), N, K)
graph = next(iter(cache._graphed.values()))
exe = graph.exec if isinstance(graph, launch.Reaimable) else graph
mk = lambda s: hopper._args(x.dtype, *addrs, hopper.cuda.CUstream(s))
pieces = {
  "assign(out=)": lambda: kmeans_kernels.assign(x, c, c_sq=c_sq, out=out),
  "assign()": lambda: kmeans_kernels.assign(x, c, c_sq=c_sq),
  "hopper.run": lambda: hopper.run(v, x, c, c_sq, out),
  "cache(addrs, mk, stream)": lambda: cache(addrs, mk, stream),
  "graph_launch": lambda: launch.graph_launch(exe, stream),
  "is_capturing": lambda: launch.is_capturing(stream),
  "torch is_current_stream_capturing": lambda: torch.cuda.is_current_stream_capturing(),
  "current_device": lambda: torch.cuda.current_device(),
  "stream_handle": lambda: launch.stream_handle(0),
  "_launches lru": lambda: hopper._launches(v, D, x.dtype, 0),
  "check_inputs": lambda: kmeans_kernels.check_inputs(x, c, c_sq, out),
  "torch.empty": lambda: torch.empty(N, dtype=torch.int32, device=x.device),
  "4 data_ptr": lambda: (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr()),
  "x.device": lambda: x.device,
  "x.get_device()": lambda: x.get_device(),
  "arch_of(x.device)": lambda: kmeans_kernels.arch_of(x.device),
  "auto_variant": lambda: hopper.auto_variant(N, D, K),
  "x.shape + dtype": lambda: (x.shape, x.dtype),
  "nothing": lambda: None,
}
for name, fn in pieces.items():
    print(f"{name:36s} {host_us(fn, chunks=40, per_chunk=40):7.2f} us", flush=True)
