"""One-device-call A/B of kernel structures (scratch; not project code).

Loads the prototypes from tools/probes/proto/ by path. They are patches against the kernel as it was at
commit f664284 (the two-accumulator kernel; the probe's results made the current one), so make them from
that version: `mkdir -p tools/probes/proto && for p in hopper_bn128_1acc hopper_bn256_1acc hopper_2cta_288; do
git show f664284:kmeans_kernels/hopper.py > tools/probes/proto/$p.py && patch tools/probes/proto/$p.py
notes/patches/kmeans-$p.patch; done`. It checks each against kmeans_kernels.reference on one input set and
times every one, plus ours (norm_broadcast) and flashlib's heuristic kernel, on the same inputs (the one run's
results: data/measured/h200/probes/kmeans_structures.csv):

  hopper_bn128_1acc   ours with ONE accumulator, no MMA/argmin overlap (isolates what the overlap buys)
  hopper_bn256_1acc   128 x 256 centroid tiles, one accumulator (flashlib's heuristic shape, our producer warp)
  hopper_2cta_288     288 threads (8 MMA warps + 1 TMA warp), 96 registers, 112 KiB: two CTAs per SM

    python probe_variants.py > variants.csv
"""
import importlib.util
import pathlib
import sys

import torch

import kmeans_kernels
from kmeans_kernels import bench as kb, reference
from workbook import timing

from probe_gemm import back_to_back_ms   # tools/probes/ is the script's folder, so on sys.path

HERE = pathlib.Path(__file__).resolve().parent
PROTOS = ("hopper_bn128_1acc", "hopper_bn256_1acc", "hopper_2cta_288")
SHAPES = ((65536, 64, 4096), (65536, 128, 512), (1 << 20, 128, 4096), (1 << 20, 256, 4096),
          (65536, 64, 16384), (262144, 128, 4096))


def load(name):
    spec = importlib.util.spec_from_file_location(name, HERE / "proto" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def contenders():
    out = [("ours_norm_broadcast",
            lambda x, c, c_sq, o: kmeans_kernels.assign(x, c, variant="norm_broadcast", c_sq=c_sq, out=o))]
    for name in PROTOS:
        mod = load(name)
        out.append((name, lambda x, c, c_sq, o, mod=mod: mod.run("norm_broadcast", x, c, c_sq, o)))
    try:
        from flashlib.primitives.kmeans.cutedsl.assign import cutedsl_assign_euclid
        out.append(("flashlib_heuristic",
                    lambda x, c, c_sq, o: cutedsl_assign_euclid(x[None], c[None], out=o[None], c_sq=c_sq,
                                                                autotune=False)))
    except Exception as e:
        print(f"# flashlib not importable: {e}", file=sys.stderr)
    return out


def main():
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (H100/H200)", file=sys.stderr)
        return 1
    todo = contenders()
    print("kernel,N,D,K,match,synced_ms,b2b_ms")
    for N, D, K in SHAPES:
        sets = [(x, c, c_sq, torch.empty(N, dtype=torch.int32, device="cuda"))
                for x, c, c_sq in kb.input_sets(N, D, K)]
        x, c, c_sq, o = sets[0]
        rows = min(N, 8192)
        want = reference.assign(x[:rows], c, c_sq)
        for name, fn in todo:
            o.fill_(-7)
            fn(x, c, c_sq, o)
            torch.cuda.synchronize()
            match = (o[:rows] == want).float().mean().item()
            synced = timing.bench(fn, sets).ms_median
            print(f"{name},{N},{D},{K},{match:.4f},{synced:.4f},{back_to_back_ms(fn, sets):.4f}", flush=True)
        del sets
    return 0


if __name__ == "__main__":
    sys.exit(main())
