"""The k-means kernel's two roles taken apart (run on the H200 from the repository root, with
notes/patches/kmeans-probe-roles.patch applied to kmeans_kernels/hopper.py; output: kmeans_roles_<commit>.csv).

Each build of lean_ping_pong launched directly (no launch cache), 3 warm-up calls, then 7 rounds in which every
build makes 10 calls back to back between two CUDA events; the median per call. Modes: the kernel as shipped;
"MMAs only" (warpgroup 0 issues every WGMMA and waits for it, warpgroup 1 only waits for and releases the slots);
"folds only" (warpgroup 1 folds a tile's accumulator, which no WGMMA wrote, warpgroup 0 only releases); "both,
apart" (the two at once, with no turns and no dependence between them)."""
import csv, statistics, sys, torch, cutlass.cute as cute
from kmeans_kernels import hopper, bench
from workbook import records

MODES = {"": "kernel as shipped", "mma_only": "MMAs only", "fold_only": "folds only", "split": "both, apart"}
prov = records.provenance()
rows = []
for N, D, K in [(65536, 64, 16384), (262144, 128, 4096), (65536, 64, 4096)]:
    x, c, c_sq = bench.input_sets(N, D, K)[0]
    out = torch.empty(N, dtype=torch.int32, device="cuda")
    stream = hopper.cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    builds = {}
    for mode, label in MODES.items():
        kernel = hopper.HopperAssign("lean_ping_pong", D, hopper._cutlass_dtype(torch.bfloat16))
        kernel.probe = mode
        compiled = cute.compile(kernel, *hopper._placeholder_args(torch.bfloat16), options="--gpu-arch sm_90a")
        builds[label] = (compiled, hopper._args(torch.bfloat16, x.data_ptr(), c.data_ptr(), c_sq.data_ptr(),
                                                out.data_ptr(), N, K, stream))
    for f, a in builds.values():
        for _ in range(3):
            f(*a)
    torch.cuda.synchronize()
    times = {label: [] for label in builds}
    for _ in range(7):
        for label, (f, a) in builds.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                f(*a)
            end.record()
            end.synchronize()
            times[label].append(start.elapsed_time(end) / 10 * 1e3)
    med = {label: statistics.median(v) for label, v in times.items()}
    print(f"{N}x{D}x{K}: " + "  ".join(f"{k} {v:.1f} us" for k, v in med.items()), flush=True)
    rows += [dict(N=N, D=D, K=K, mode=label, us_median=med[label], us_min=min(v), us_max=max(v), **prov)
             for label, v in times.items()]
with open(sys.argv[1], "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
