"""Why ours/auto read 4x ours/norm_broadcast at K = 512 in the floor bench: launch-cache counts per contender;
and the per-repeat driver calls through ctypes against cuda-python, on a tiny graph (GPU never the bottleneck)."""
import time, torch
import cuda.bindings.driver as cuda
from kmeans_kernels import bench, floor_bench, hopper
from workbook import launch

def per_call_us(fn, calls=300):
    fn(); torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(calls): fn()
    us = (time.perf_counter() - t) / calls * 1e6; torch.cuda.synchronize(); return us

for shape in [(65536, 64, 512), (65536, 128, 512)]:
    sets = bench.input_sets(*shape)
    fns = floor_bench.contenders(flashlib_autotune=False)
    caches = {v: hopper._launches(v, shape[1], torch.bfloat16, 0) for v in ("norm_broadcast", "lean_select")}
    before = {v: dict(c.counts) for v, c in caches.items()}
    frame = floor_bench.measure(fns, sets)
    k = frame[frame.timing == "kernel"].set_index(["kernel", "variant"]).ms_median
    print(shape, {f"{a}/{b}": round(v * 1e3, 1) for (a, b), v in k.items()}, "us")
    for v, c in caches.items():
        print("  ", v, {n: c.counts[n] - before[v][n] for n in c.counts}, "entries", len(c), "graphs", c.graph_count)

x = torch.zeros(1, device="cuda")
def enqueue(s):
    with torch.cuda.stream(torch.cuda.ExternalStream(s)):
        x.add_(1)
g = launch.capture_graph(enqueue)

stream = launch.stream_handle(0)
for name, fn in {"is_capturing (cuda-python)": lambda: launch.is_capturing(stream),
                 
                 
                 "graph_launch": lambda: launch.graph_launch(g, stream)}.items():
    print(f"{name:<34} {min(per_call_us(fn) for _ in range(5)):6.2f} us")

# a first sighting (a new output at every call: the patched template) against a replay, host time per call
import kmeans_kernels as km, gemm_kernels
x, c, c_sq = bench.input_sets(65536, 64, 512)[0]
outs = [torch.empty(65536, dtype=torch.int32, device="cuda") for _ in range(300)]
km.assign(x, c, c_sq=c_sq, out=outs[0]); torch.cuda.synchronize()
cache = hopper._launches("norm_broadcast", 64, torch.bfloat16, 0)
for label, seq in (("assign, a new out each call", outs[1:]), ("assign, one out (replays)", [outs[0]] * 299)):
    before = dict(cache.counts); t = time.perf_counter()
    for o in seq: km.assign(x, c, c_sq=c_sq, out=o)
    us = (time.perf_counter() - t) / len(seq) * 1e6; torch.cuda.synchronize()
    print(f"{label:<34} {us:6.1f} us host per call", {n: cache.counts[n] - before[n] for n in cache.counts})
a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16); b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
couts = [torch.empty(1024, 1024, device="cuda", dtype=torch.bfloat16) for _ in range(300)]
gemm_kernels.gemm(a, b, out=couts[0]); torch.cuda.synchronize()
for label, seq in (("gemm 1024^3, a new out each call", couts[1:]), ("gemm 1024^3, one out (replays)", [couts[0]] * 299)):
    t = time.perf_counter()
    for o in seq: gemm_kernels.gemm(a, b, out=o)
    us = (time.perf_counter() - t) / len(seq) * 1e6; torch.cuda.synchronize()
    print(f"{label:<34} {us:6.1f} us host per call")
ok = all(torch.equal(o, couts[0]) for o in couts[1:]) and all(torch.equal(o, outs[0]) for o in outs[1:])
print("every output equal to the first:", ok)
