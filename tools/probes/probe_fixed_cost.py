"""One-device-call probe: split k-means assign time into host, per-CTA-wave and per-centroid-tile parts.

Scratch script for the next H200 session (not project code; copy it to tools/ if it earns a place).
For ours (norm_broadcast, serial) and flashlib's CuTe DSL kernel (static heuristic) it times, on the same
inputs in one process:

  synced     the seeds' method (workbook.timing.bench: events around each call, sync after each)
  b2b        200 calls back to back between two events, no sync in between: GPU time per call once the
             host runs ahead, i.e. without host time in the interval
  host       perf_counter around 200 calls without sync (host cost per call; the queue absorbs the GPU)

over a K sweep at N = 65536 (slope = cost per 128-centroid tile of the whole grid, intercept = K-independent
cost) and an N sweep at K = 4096 (N = 132*128*w: exactly w waves at 1 CTA/SM), for D = 64 and 128, plus the
seeds' 1M x 128 x 4096 point. Prints CSV to stdout. Budget: about 2-3 minutes of device time.

    python probe_fixed_cost.py > probe.csv
"""
import sys

import torch

import kmeans_kernels
from kmeans_kernels import bench as kb
from workbook import timing

SM = 132


def contenders():
    out = []
    for variant in ("norm_broadcast", "serial"):
        def ours(x, c, c_sq, o, variant=variant):
            kmeans_kernels.assign(x, c, variant=variant, c_sq=c_sq, out=o)
        out.append((f"ours_{variant}", ours))
    try:
        from flashlib.primitives.kmeans.cutedsl.assign import cutedsl_assign_euclid
    except Exception as e:  # flashlib is a comparison only; it may be missing
        print(f"# flashlib not importable: {e}", file=sys.stderr)
    else:
        def flash(x, c, c_sq, o):
            cutedsl_assign_euclid(x[None], c[None], out=o[None], c_sq=c_sq, autotune=False)
        out.append(("flashlib_heuristic", flash))
    return out


def shapes():
    for D in (64, 128):
        for K in (512, 1024, 2048, 4096, 8192, 16384):
            yield "k_sweep", 65536, D, K
        for waves in (1, 2, 4, 8):
            yield "n_sweep", SM * 128 * waves, D, 4096
    yield "large", 1 << 20, 128, 4096


def main():
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (H100/H200)", file=sys.stderr)
        return 1
    todo = contenders()
    print("sweep,kernel,N,D,K,tiles128,synced_ms,b2b_ms,host_ms")
    for sweep, N, D, K in shapes():
        sets = [(x, c, c_sq, torch.empty(N, dtype=torch.int32, device="cuda"))
                for x, c, c_sq in kb.input_sets(N, D, K)]
        for name, fn in todo:
            synced = timing.bench(fn, sets).ms_median
            b2b, host = timing.back_to_back(fn, sets, calls=200)
            print(f"{sweep},{name},{N},{D},{K},{-(-K // 128)},{synced:.4f},{b2b:.4f},{host:.4f}", flush=True)
        del sets
    return 0


if __name__ == "__main__":
    sys.exit(main())
