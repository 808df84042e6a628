"""Probe: where the synchronised latency of a small gemm(a, b) goes, against torch.matmul. Contenders at each
shape, three input sets in turn (workbook.timing.bench_interleaved, each call between two events and then
synchronised): torch.matmul; gemm_kernels.gemm; hopper_host.gemm; hopper_host.gemm with out given; the launch
cache alone (hopper_host._launch); the re-aimed graph launched by cuda-python and by ctypes; the graph's kernel
launched directly by ctypes cuLaunchKernelEx from the graph node's parameters; an empty call (the events' own
floor). Also each one's host issue rate (perf_counter over 2000 calls back to back).
    python gemm_latency_layers_probe.py OUT_DIR"""
import sys, ctypes, time, statistics, json
import torch
import cuda.bindings.driver as cu
import gemm_kernels
from gemm_kernels import hopper_host
from workbook import launch, timing
out_dir = sys.argv[1]
lib = ctypes.CDLL("libcuda.so.1")
lib.cuGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.cuGraphLaunch.restype = ctypes.c_int

class LaunchAttr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]
class LaunchConfig(ctypes.Structure):
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint), ("bx", ctypes.c_uint),
                ("by", ctypes.c_uint), ("bz", ctypes.c_uint), ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttr)), ("nattrs", ctypes.c_uint)]
lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
lib.cuLaunchKernelEx.restype = ctypes.c_int

def issue_us(fn, sets, calls=2000):
    for i in range(20):
        fn(*sets[i % 3])
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(calls):
        fn(*sets[i % 3])
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / calls * 1e6

rows = []
for (M, N, K) in [(1024, 1024, 1024), (128, 4096, 4096), (16, 8192, 4096), (2048, 1024, 1024), (4096, 4096, 4096)]:
    sets = []
    for i in range(3):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        sets.append((a, b, torch.empty(M, N, device="cuda", dtype=torch.bfloat16)))
    call = hopper_host._call_for(M, N, K, 0, None, dtype=torch.bfloat16)
    stream = launch.stream_handle(0)
    for _ in range(12):
        for a, b, o in sets:
            hopper_host.gemm(a, b, out=o)
    torch.cuda.synchronize()
    graphs = {}
    for (k, s), g in call.launches._graphed.items():
        graphs[k[0]] = g
    assert len(graphs) == 3, (len(graphs), list(call.launches._graphed))
    # direct launches from the graph node's parameters (the Reaimable's own buffers; c re-aimed in place)
    direct = {}
    for a_ptr, g in graphs.items():
        p = g.params
        func = p.func if int(p.func) else cu.cuKernelGetFunction(p.kern)[1]
        err, val = cu.cuGraphKernelNodeGetAttribute(g.node, cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
        attr = LaunchAttr(id=int(cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION))
        attr.value[0], attr.value[1], attr.value[2] = val.clusterDim.x, val.clusterDim.y, val.clusterDim.z
        cfg = LaunchConfig(p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ,
                           p.sharedMemBytes, stream, ctypes.pointer(attr), 1)
        direct[a_ptr] = (cfg, attr, int(func), ctypes.addressof(g._array), g.slots[0])
    def run_direct(a, b, o):
        cfg, attr, func, params, slot = direct[a.data_ptr()]
        slot.value = o.data_ptr()
        r = lib.cuLaunchKernelEx(ctypes.byref(cfg), func, params, None)
        if r:
            raise RuntimeError(f"cuLaunchKernelEx {r}")
    def run_graph_cp(a, b, o):
        g = graphs[a.data_ptr()]; g.aim((o.data_ptr(),)); launch.graph_launch(g.exec, stream)
    def run_graph_ct(a, b, o):
        g = graphs[a.data_ptr()]; g.aim((o.data_ptr(),)); lib.cuGraphLaunch(int(g.exec), stream)
    fns = {
        "empty": lambda a, b, o: None,
        "torch.matmul": lambda a, b, o: torch.matmul(a, b),
        "gemm_kernels.gemm": lambda a, b, o: gemm_kernels.gemm(a, b),
        "hopper_host.gemm": lambda a, b, o: hopper_host.gemm(a, b),
        "hopper_host.gemm(out=)": lambda a, b, o: hopper_host.gemm(a, b, out=o),
        "_launch (cache)": lambda a, b, o: hopper_host._launch(call, a, b, o, stream),
        "graph, cuda-python": run_graph_cp,
        "graph, ctypes": run_graph_ct,
        "kernel, ctypes cuLaunchKernelEx": run_direct,
    }
    # correctness of the direct paths
    ref = sets[0][0].float() @ sets[0][1].float()
    for name in ("graph, ctypes", "kernel, ctypes cuLaunchKernelEx"):
        sets[0][2].fill_(float("nan")); fns[name](*sets[0]); torch.cuda.synchronize()
        err = ((sets[0][2].float() - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-2, (name, err)
    lat = timing.bench_interleaved(fns, sets, rounds=40, warmup=20, iters=400)
    gpu = {}
    for name, fn in fns.items():
        if name == "empty":
            continue
        ms, host = timing.back_to_back(fn, sets, calls=300)
        gpu[name] = ms * 1e3
    for name, fn in fns.items():
        row = dict(shape=f"{M}x{N}x{K}", contender=name, sync_us=round(lat[name].ms_median * 1e3, 2),
                   sync_min_us=round(lat[name].ms_min * 1e3, 2), b2b_us=round(gpu.get(name, float("nan")), 2),
                   issue_us=round(issue_us(fn, sets), 2))
        rows.append(row)
        print(json.dumps(row), flush=True)
import pandas as pd
df = pd.DataFrame(rows)
df.to_csv(f"{out_dir}/latency_paths.csv", index=False)
pd.set_option("display.width", 200)
print(df.pivot_table(index="contender", columns="shape", values="sync_us", sort=False).round(1).to_string())
print(df.pivot_table(index="contender", columns="shape", values="issue_us", sort=False).round(1).to_string())
print(df.pivot_table(index="contender", columns="shape", values="b2b_us", sort=False).round(1).to_string())
