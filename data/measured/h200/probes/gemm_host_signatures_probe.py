"""Probe: gemm_kernels.gemm(a, b)'s host path now (new) against the path of 7158d30 (old: its hopper_host.py and
workbook/launch.py loaded beside the new ones, the old top-level gemm rebuilt here), and torch.matmul, three input
sets in turn, a new output each call. Host issue rate (perf_counter over 2000 calls, 9 rounds taking turns) and
workbook.timing.compare's two timings (20 rounds x 10 calls). Ratios new / old and new / torch, bootstrap 95 %.
Then host nanoseconds per call of ways to ask whether a stream is capturing, and of two ways to allocate c.
    git show 7158d30:gemm_kernels/hopper_host.py > OLD/old_hopper_host.py
    git show 7158d30:workbook/launch.py > OLD/old_launch.py
    python gemm_host_signatures_probe.py OUT_DIR OLD"""
import ctypes, importlib.util, itertools, statistics, sys, time
import pandas as pd
import torch
import cuda.bindings.driver as cu
import gemm_kernels
from workbook import launch, records, timing

def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod

old = sys.argv[2]
old_launch = load("old_launch", f"{old}/old_launch.py")
src = open(f"{old}/old_hopper_host.py").read().replace("from workbook import launch\n", "import old_launch as launch\n")
open(f"{old}/old_hopper_host_patched.py", "w").write(src)
old_hh = load("old_hopper_host", f"{old}/old_hopper_host_patched.py")
assert old_hh.launch is old_launch
from gemm_kernels import hopper_host
import functools
@functools.lru_cache(maxsize=None)
def _old_launches(cfg, device):      # the old launch cache around the same compiled kernel (no second compile)
    compiled = hopper_host._launches(cfg, device).compiled
    return old_launch.LaunchCache(compiled, device=device, pointers=7,
                                  reaimable=(2,) if cfg.epilogue == "register" else ())
old_hh._launches = _old_launches

def old_gemm(a, b, options=None, **overrides):
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise ValueError("a and b must be torch tensors")
    if a.device.type != "cuda" or b.device != a.device:
        raise ValueError(f"a and b must be CUDA tensors on one device; got {a.device} and {b.device}")
    gemm_kernels.backend(gemm_kernels.arch_of(a.device))       # the old lookup, its module unused
    return old_hh.gemm(a, b, options, **overrides)

out_dir = sys.argv[1]
rows = []
for M, N, K in [(1024, 1024, 1024), (128, 4096, 4096), (16, 8192, 4096), (2048, 1024, 1024), (1000, 1000, 1000),
                (256, 4096, 4096), (4096, 4096, 4096)]:
    sets = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
             torch.randn(K, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    fns = {"new": gemm_kernels.gemm, "old": old_gemm, "torch": torch.matmul}
    a, b = sets[0]
    assert torch.equal(fns["new"](a, b), fns["old"](a, b))
    for f in fns.values():
        for i in range(30):
            f(*sets[i % 3])
    torch.cuda.synchronize()
    per = {n: [] for n in fns}
    order = list(fns)
    for r in range(9):
        for n in order[r % 3:] + order[:r % 3]:
            f, turn = fns[n], itertools.cycle(sets)
            t = time.perf_counter()
            for _ in range(2000):
                f(*next(turn))
            per[n].append((time.perf_counter() - t) / 2000 * 1e6)
            torch.cuda.synchronize()
    base = dict(M=M, N=N, K=K)
    for other in ("old", "torch"):
        rr = timing.ratio_of([x / y for x, y in zip(per["new"], per[other])])
        rows.append(dict(base, timing="host", vs=other, ratio=rr.value, lo=rr.lo, hi=rr.hi, rounds=rr.rounds,
                         new_us=statistics.median(per["new"]), other_us=statistics.median(per[other])))
    cmp = timing.compare(fns, sets, baseline="old", rounds=20, calls=10)
    for t in (timing.LATENCY, timing.KERNEL):
        for other in ("old", "torch"):
            r = timing.ratio_of([x / y for x, y in zip(cmp.per_round[t]["new"], cmp.per_round[t][other])])
            rows.append(dict(base, timing=t, vs=other, ratio=r.value, lo=r.lo, hi=r.hi, rounds=r.rounds,
                             new_us=cmp.timing("new", t).ms_median * 1e3, other_us=cmp.timing(other, t).ms_median * 1e3))
    for x in rows[-6:]:
        print(f"{M}x{N}x{K} {x['timing']:8s} new/{x['vs']:5s} {x['ratio']:.3f} [{x['lo']:.3f}, {x['hi']:.3f}]  new {x['new_us']:.2f} us  {x['vs']} {x['other_us']:.2f} us", flush=True)
df = pd.DataFrame(rows)
for k, v in records.provenance().items():
    df[k] = v
df.to_csv(f"{out_dir}/gemm_host_signatures.csv", index=False)

# is the stream capturing? three ways, host time each
lib = ctypes.CDLL("libcuda.so.1")
lib.cuStreamIsCapturing.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
status = ctypes.c_int()
def per_call_ns(fn, calls=20000):
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e9
stream = launch.stream_handle(0)
ways = {"cuda-python cuStreamIsCapturing": lambda: launch.is_capturing(stream),
        "ctypes cuStreamIsCapturing": lambda: lib.cuStreamIsCapturing(stream, ctypes.byref(status)) or status.value,
        "torch.cuda.is_current_stream_capturing": torch.cuda.is_current_stream_capturing,
        "torch._C._cuda_isCurrentStreamCapturing": torch._C._cuda_isCurrentStreamCapturing,
        "torch._C._cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "a.new_empty((M, N))": lambda: a.new_empty((M, N)),
        "torch.empty_like(a)": lambda: torch.empty_like(a)}
with open(f"{out_dir}/capture_checks.txt", "w") as f:
    for name, fn in ways.items():
        best = min(per_call_ns(fn) for _ in range(5))
        line = f"{name:45s} {best:8.0f} ns"
        print(line); f.write(line + "\n")
