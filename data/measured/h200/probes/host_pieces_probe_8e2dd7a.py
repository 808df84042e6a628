"""Host us per call: torch.empty forms and assign's pieces, 65536x64x512 (device probe)."""
import sys, torch
sys.path.insert(0, "tools")
from host_cost import host_us
import kmeans_kernels
from kmeans_kernels import hopper, bench
from workbook import launch
N, D, K = 65536, 64, 512
x, c, c_sq = bench.input_sets(N, D, K)[0]
out = torch.empty(N, dtype=torch.int32, device="cuda")
dev = x.device
i32 = torch.int32
for _ in range(20):
    kmeans_kernels.assign(x, c, c_sq=c_sq, out=out)
    kmeans_kernels.assign(x, c, c_sq=c_sq)
torch.cuda.synchronize()
pieces = {
  "assign(out=)": lambda: kmeans_kernels.assign(x, c, c_sq=c_sq, out=out),
  "assign()": lambda: kmeans_kernels.assign(x, c, c_sq=c_sq),
  "check_inputs": lambda: kmeans_kernels.check_inputs(x, c, c_sq, out),
  "check_inputs no out": lambda: kmeans_kernels.check_inputs(x, c, c_sq, None),
  "hopper.run": lambda: hopper.run("lean_ping_pong", x, c, c_sq, out),
  "torch.empty(N, dtype, device=x.device)": lambda: torch.empty(N, dtype=i32, device=x.device),
  "torch.empty(N, dtype, device=dev)": lambda: torch.empty(N, dtype=i32, device=dev),
  "torch.empty((N,), dtype, device=dev)": lambda: torch.empty((N,), dtype=i32, device=dev),
  "x.new_empty((N,), dtype)": lambda: x.new_empty((N,), dtype=i32),
  "x.new_empty(N, dtype)": lambda: x.new_empty(N, dtype=i32),
  "torch.empty_strided": lambda: torch.empty_strided((N,), (1,), dtype=i32, device=dev),
  "torch.empty(N, dtype, device=0)": lambda: torch.empty(N, dtype=i32, device=0),
  "torch.empty(N, dtype, device='cuda')": lambda: torch.empty(N, dtype=i32, device="cuda"),
  "type(x) is Tensor x4": lambda: (type(x) is torch.Tensor, type(c) is torch.Tensor, type(c_sq) is torch.Tensor, type(out) is torch.Tensor),
  "is_cuda x2": lambda: (x.is_cuda, c.is_cuda),
  "get_device x4": lambda: (x.get_device(), c.get_device(), c_sq.get_device(), out.get_device()),
  "is_contiguous x4": lambda: (x.is_contiguous(), c.is_contiguous(), c_sq.is_contiguous(), out.is_contiguous()),
  "data_ptr x4": lambda: (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr()),
  "shape x4": lambda: (x.shape, c.shape, c_sq.shape, out.shape),
  "dtype x4": lambda: (x.dtype, c.dtype, c_sq.dtype, out.dtype),
  "stride x2": lambda: (x.stride(), c.stride()),
  "nothing": lambda: None,
}
for name, fn in pieces.items():
    print(f"{name:40s} {host_us(fn, chunks=40, per_chunk=40):7.2f} us", flush=True)
