"""Two k-means assignment variants taking turns (`workbook.timing.compare`): the ratio of their times, both timings,
with 95 % intervals; rows to data/measured/<gpu>/kmeans_<variant>.csv.

    python tools/kmeans_ab.py                                    # lean_select against norm_broadcast
    python tools/kmeans_ab.py --new lean_select --old norm_broadcast --shapes 65536,128,4096 1048576,128,4096
"""
from __future__ import annotations

import argparse

import kmeans_kernels as km
from kmeans_kernels import bench
from workbook import gpus, records, timing

SHAPES = ["65536,64,4096", "65536,64,16384", "65536,128,4096", "1048576,128,4096"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--new", default="lean_select")
    p.add_argument("--old", default="norm_broadcast")
    p.add_argument("--shapes", nargs="+", default=SHAPES, help="N,D,K shapes")
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args(argv)
    spec = gpus.current()
    if spec is None:
        raise SystemExit("needs a GPU; recorded: data/measured/h200/kmeans_lean_select.csv")
    for text in args.shapes:
        N, D, K = (int(v) for v in text.split(","))
        sets = bench.input_sets(N, D, K)         # the seeds' inputs, norms given: the kernels' time, not the norms'
        fns = {("ours", v): (lambda x, c, c_sq, v=v: km.assign(x, c, variant=v, c_sq=c_sq))
               for v in (args.old, args.new)}
        cmp = timing.compare(fns, sets, baseline=("ours", args.old), rounds=args.rounds)
        records.append(spec.key, f"kmeans_{args.new}", cmp.frame({"N": N, "D": D, "K": K}))
        for t in ("kernel", "latency"):
            r = cmp.ratio(("ours", args.new), t)
            print(N, D, K, t, f"{r.value:.3f} [{r.lo:.3f}, {r.hi:.3f}] {r.verdict}", flush=True)


if __name__ == "__main__":
    main()
