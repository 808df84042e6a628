"""`kmeans_kernels.fit` across processes: several GPUs of one host (NCCL) or CPU processes (gloo).

    torchrun --nproc_per_node=2 -m kmeans_kernels.lloyd_distributed --n 2000000,8000000 --d 128 --k 4096 --iters 10
    python -m kmeans_kernels.lloyd_distributed --spawn 2 --n 20000 --d 32 --k 64 --iters 5   # torch.multiprocessing
    results = run_sharded(x, k, world=2, iters=5)      # from Python: fit on 2 local CPU processes (gloo)

For each N the launcher makes one global x of small integers (exact in bf16: k well-separated integer centres
plus noise in {-1, 0, 1}; generated from --seed on every rank, so every rank has the same x), gives rank r
the r-th consecutive slice of rows, and runs `fit(..., tol=None, group=WORLD)`: exactly --iters Lloyd
iterations from k-means++ (seed --seed), after one untimed warm-up fit that compiles the kernels. Each Lloyd
iteration is timed with CUDA events (`kmeans_kernels.lloyd.timeline`), and so is its all-reduce of the cluster
sums and counts, as seen from the current stream: the collective plus any wait for the slower rank.
Then rank 0 runs the same fit on the whole x alone (one GPU) and checks the result: the centroids must be
equal bit for bit and the ids equal (the sums are integers, so the all-reduce is exact: see lloyd.py).

NCCL_NVLS_ENABLE=0 is set before NCCL starts: NVLink multicast (NVLS) stays off on the machines we measure
on, whatever the environment said. Rows go to data/measured/<gpu>x<world>/kmeans_lloyd_distributed.csv via
workbook.records (one row for the sharded run and one for the single GPU, per N), unless --no-record or on
the CPU (gloo), where nothing is recorded: CPU times are no stand-in for GPU times.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kmeans_kernels.lloyd import FitResult, fit, iteration_times, timeline
from workbook import gpus, records

TABLE = "kmeans_lloyd_distributed"


def exact_data(n: int, d: int, k: int, seed: int, device) -> torch.Tensor:
    """bf16 [n, d] of small integers: k centres with even coordinates in [-16, 16] plus noise in {-1, 0, 1}.
    Two random centres differ by about 190 per coordinate squared, the noise by at most 4: well separated."""
    gen = torch.Generator(device=device).manual_seed(seed)
    centres = 2 * torch.randint(-8, 9, (k, d), generator=gen, device=device)
    labels = torch.randint(0, k, (n,), generator=gen, device=device)
    noise = torch.randint(-1, 2, (n, d), generator=gen, device=device)
    return (centres[labels] + noise).to(torch.bfloat16)


def split(n: int, world: int) -> list[int]:
    """Rows per rank: as even as possible, the first ranks one more."""
    return [n // world + (1 if r < n % world else 0) for r in range(world)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawned(rank: int, world: int, port: int, fn, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    fn(*args)


def spawn(world: int, fn, *args) -> None:
    """Run fn(*args) in `world` fresh local processes with torchrun's environment (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR/PORT), so that fn can `dist.init_process_group(backend)`; waits for all."""
    mp.start_processes(_spawned, args=(world, _free_port(), fn, args), nprocs=world, start_method="spawn")


def _fit_shard(path: str, k: int, sizes: list[int], kwargs: dict) -> None:
    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        x = torch.load(os.path.join(path, "x.pt"))
        lo = sum(sizes[:rank])
        r = fit(x[lo:lo + sizes[rank]].contiguous(), k, group=dist.group.WORLD, **kwargs)
        torch.save(r.__dict__, os.path.join(path, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def run_sharded(x: torch.Tensor, k: int, *, world: int = 2, sizes: list[int] | None = None,
                **kwargs) -> list[FitResult]:
    """fit(x, k, **kwargs) on `world` local CPU processes (gloo), rank r holding the r-th slice of rows
    (`sizes`, default `split`); each rank's FitResult, in rank order. For tests and notebooks."""
    sizes = split(x.shape[0], world) if sizes is None else list(sizes)
    if len(sizes) != world or sum(sizes) != x.shape[0]:
        raise ValueError(f"sizes {sizes} must be {world} row counts adding up to N={x.shape[0]}")
    with tempfile.TemporaryDirectory() as path:
        torch.save(x.cpu(), os.path.join(path, "x.pt"))
        spawn(world, _fit_shard, path, k, sizes, kwargs)
        return [FitResult(**torch.load(os.path.join(path, f"rank{r}.pt"))) for r in range(world)]


def _gather_ids(ids: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    padded = torch.full((max(sizes),), -2, dtype=ids.dtype, device=ids.device)
    padded[:ids.shape[0]] = ids
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([p[:n] for p, n in zip(parts, sizes)])


def _timed_fit(x, args, group):
    """fit with --iters iterations and its per-iteration (ms, all-reduce ms) marks."""
    with timeline() as marks:
        r = fit(x, args.k, iters=args.iters, tol=None, init="k-means++", seed=args.seed, group=group)
    return r, iteration_times(marks)


def _row(variant, N, args, world, times, match_rate, centroids_equal, gpu_name):
    per_iter = [t for t, _ in times]
    reduce_ms = statistics.median(a for _, a in times)
    med = statistics.median(per_iter)
    return dict(kernel="ours", variant=variant, N=N, D=args.d, K=args.k, iters=args.iters, world=world,
                ms_median=med, ms_min=min(per_iter), ms_max=max(per_iter), tflops=2.0 * N * args.d * args.k / med / 1e9,
                match_rate=match_rate, allreduce_ms=reduce_ms, allreduce_share=reduce_ms / med,
                centroids_equal=int(centroids_equal), gpu=gpu_name)


def _run(args) -> dict:
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # never NVLink multicast (see the module docstring)
    cuda = torch.cuda.is_available() and not args.cpu
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    summary = {"runs": []}
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        group = dist.group.WORLD
        spec = gpus.current() if cuda else None
        gpu_name = f"{torch.cuda.get_device_name(device)} x{world}" if cuda else f"cpu x{world}"
        rows = []
        for N in args.n:
            x_all = exact_data(N, args.d, args.k, args.seed, device)
            sizes = split(N, world)
            lo = sum(sizes[:rank])
            x = x_all[lo:lo + sizes[rank]].contiguous()
            if rank != 0:
                del x_all
            fit(x, args.k, iters=1, tol=None, init="random", seed=args.seed, group=group)  # compile, warm up
            r, times = _timed_fit(x, args, group)
            ids = _gather_ids(r.ids, sizes)
            run = {"N": N, "world": world, "sharded_ms": [t for t, _ in times],
                   "allreduce_ms": [a for _, a in times]}
            if rank == 0:
                fit(x_all, args.k, iters=1, tol=None, init="random", seed=args.seed)
                one, one_times = _timed_fit(x_all, args, None)
                equal = bool(torch.equal(one.centroids, r.centroids))
                match = float((one.ids == ids).double().mean())
                run.update(single_ms=[t for t, _ in one_times], centroids_equal=equal, ids_match=match,
                           iterations=(r.iterations, one.iterations))
                rows.append(_row(f"fit_{world}ranks", N, args, world, times, match, equal, gpu_name))
                rows.append(_row("fit_single", N, args, 1, one_times, 1.0, True, gpu_name))
                print(f"N={N:>9} D={args.d} K={args.k}: {world} ranks {statistics.median(run['sharded_ms']):.3f} ms "
                      f"per iteration (all-reduce {statistics.median(run['allreduce_ms']):.3f} ms), one "
                      f"{'GPU' if cuda else 'process'} {statistics.median(run['single_ms']):.3f} ms; "
                      f"centroids equal bit for bit: {equal}; ids equal: {match:.6f}", flush=True)
                del x_all
            summary["runs"].append(run)
            dist.barrier()
        if rank == 0:
            if rows and cuda and not args.no_record:
                folder = f"{spec.key}x{world}"
                print(f"appended {len(rows)} rows to {records.append(folder, TABLE, rows)}")
            elif not cuda:
                print("gloo on the CPU: nothing recorded (CPU times are no stand-in for GPU times)")
            if args.summary:
                with open(args.summary, "w") as f:
                    json.dump(summary, f)
    finally:
        dist.destroy_process_group()
    return summary


def scaling(df):
    """Per N of the newest run in `df` (records.read("h200x2", TABLE)): ms per Lloyd iteration on one GPU and
    on the ranks, the speedup, the scaling efficiency (speedup / ranks), the all-reduce's share of an
    iteration, and whether the answers were equal. Empty if nothing was recorded."""
    import pandas as pd
    if df.empty:
        return pd.DataFrame()
    run = df[df.date == df.date.max()]
    one = run[run.variant == "fit_single"].set_index("N")
    many = run[run.variant != "fit_single"].set_index("N")
    both = one.index.intersection(many.index)
    out = pd.DataFrame({"ranks": many.loc[both, "world"], "one GPU ms": one.loc[both, "ms_median"],
                        "sharded ms": many.loc[both, "ms_median"]})
    out["speedup"] = out["one GPU ms"] / out["sharded ms"]
    out["efficiency"] = out["speedup"] / out["ranks"]
    out["all-reduce share"] = many.loc[both, "allreduce_share"]
    out["equal"] = (many.loc[both, "centroids_equal"] == 1) & (many.loc[both, "match_rate"] == 1.0)
    return out.reset_index()


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m kmeans_kernels.lloyd_distributed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=lambda s: [int(v) for v in s.split(",")], default=[2_000_000],
                    help="global points, comma list (default 2000000)")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=10, help="Lloyd iterations timed (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spawn", type=int, default=0, metavar="W",
                    help="start W local processes with torch.multiprocessing instead of torchrun")
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU even where CUDA is present")
    ap.add_argument("--no-record", action="store_true", help="print only; append nothing to data/measured/")
    ap.add_argument("--summary", default=None, help="rank 0 writes the per-iteration times here as JSON")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if args.spawn and "RANK" not in os.environ:
        spawn(args.spawn, _run, args)
        return 0
    if "RANK" not in os.environ:
        print("start this with torchrun --nproc_per_node=W -m kmeans_kernels.lloyd_distributed ..., or pass --spawn W")
        return 2
    _run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
