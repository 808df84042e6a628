"""Where a small GEMM's or k-means assignment's time goes: the host's microseconds per call, piece by piece,
and the GPU's kernel time per call (CUPTI, through `gemm_kernels.sweep.gpu_ms`).

    python tools/host_cost.py                      # GEMM, ours against torch.matmul: 1024^3 and 16x8192x4096
    python tools/host_cost.py --shapes 2048x2048x2048 --calls 2000
    python tools/host_cost.py --kmeans             # assign(): host pieces, then GPU time per variant, 13 seed shapes
    python tools/host_cost.py --kmeans-launch      # re-aimed graphs against graphs per address set and templates, fresh outputs
    python tools/host_cost.py --gemm-launch        # the same for gemm(a, b)

Host pieces are each timed over `--calls` repetitions with time.perf_counter; "issue rate" is back-to-back calls
with no synchronisation divided by their count (the host's rate, as long as the GPU keeps up).
"""
from __future__ import annotations

import argparse
import itertools
import time

import torch

import gemm_kernels
from gemm_kernels import hopper_host, rule, sweep
from gemm_kernels.hopper_options import DTYPES
from gemm_kernels.bench import shape_arg
from workbook import launch


def per_call_us(fn, calls: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


def kmeans(calls: int, gpu_calls: int = 50) -> None:
    """assign()'s host pieces at 65536 x 64 x 512, then each variant's GPU time per call at the seed shapes."""
    import kmeans_kernels
    from kmeans_kernels import bench, floor, hopper, reference
    x, c, c_sq = bench.input_sets(65536, 64, 512)[0]
    out = torch.empty(x.shape[0], dtype=torch.int32, device=x.device)
    run = lambda: hopper.run("norm_broadcast", x, c, c_sq, out)            # noqa: E731
    for _ in range(launch.CAPTURE_AFTER + 1):
        run()
    pieces = {
        "assign(x, c, c_sq=c_sq) issue rate": lambda: kmeans_kernels.assign(x, c, c_sq=c_sq),
        "assign(x, c, c_sq=c_sq, out=out)": lambda: kmeans_kernels.assign(x, c, c_sq=c_sq, out=out),
        "assign(x, c) (norms each call)": lambda: kmeans_kernels.assign(x, c),
        "check_inputs": lambda: kmeans_kernels.check_inputs(x, c, c_sq, None),
        "arch_of": lambda: kmeans_kernels.arch_of(x.device),
        "auto_variant": lambda: hopper.auto_variant(65536, 64, 512),
        "torch.empty": lambda: torch.empty(x.shape[0], dtype=torch.int32, device=x.device),
        "reference.centroid_norms": lambda: reference.centroid_norms(c),
        "hopper.run (replay)": run,
        "torch.argmin(x @ c.T) issue rate": lambda: torch.argmin(x @ c.T, dim=1),
    }
    print("\nassign at 65536x64x512, host time per call")
    for name, fn in pieces.items():
        us = per_call_us(fn, calls)
        torch.cuda.synchronize()
        print(f"  {name:<38} {us:8.2f} us per call")
    print("\nGPU time per call (us), and the floor (kmeans_kernels.floor)")
    print(f"  {'N x D x K':<18} {'floor':>7} " + " ".join(f"{v:>14}" for v in hopper.VARIANTS))
    for N, D, K in bench.seed_shapes():
        sets = bench.input_sets(N, D, K)[:1]
        outs = torch.empty(N, dtype=torch.int32, device="cuda")
        fns = {v: (lambda x, c, c_sq, v=v: hopper.run(v, x, c, c_sq, outs)) for v in hopper.VARIANTS
               if hopper.takes(v, D)}
        for fn in fns.values():
            fn(*sets[0])
        gpu = sweep.gpu_ms(fns, sets, calls=gpu_calls)
        cells = " ".join(f"{1e3 * gpu[v]:14.1f}" if v in gpu else f"{'-':>14}" for v in hopper.VARIANTS)
        print(f"  {f'{N}x{D}x{K}':<18} {1e3 * floor.floor(N, D, K).ms:7.1f} {cells}", flush=True)


LAUNCH_SHAPES = ((65536, 64, 512), (65536, 128, 512), (65536, 256, 512), (65536, 128, 4096))


def host_us(fn, chunks: int = 30, per_chunk: int = 50) -> float:
    """Host microseconds per call, the median over chunks of `per_chunk` calls each enqueued with no wait and
    timed alone (the GPU drained between chunks, so a full launch queue never holds the host back)."""
    times = []
    for _ in range(chunks):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(per_chunk):
            fn()
        times.append((time.perf_counter() - t) / per_chunk * 1e6)
    torch.cuda.synchronize()
    return sorted(times)[len(times) // 2]


def _time_launch_paths(fns, sets, label: str, columns: dict, flops: float, pairs, correct) -> "pd.DataFrame":
    """Each path warmed past its capture sighting and checked (`correct(output)` on the first input set), then its
    host us per call (host_us) and both timings in interleaved rounds (`workbook.timing.compare`, against
    launch/graph); prints the host times and the ratios of `pairs` ((path, reference) names), returns the rows."""
    from workbook import timing
    for name, fn in fns.items():
        for _ in range(2 * launch.CAPTURE_AFTER):
            got = fn(*sets[0])
        torch.cuda.synchronize()
        if not correct(got):
            raise AssertionError(f"{name} at {label} gives a wrong answer")
    host = {name.split("/")[1]: host_us(lambda fn=fn: fn(*sets[0])) for name, fn in fns.items()}
    cmp = timing.compare(fns, sets, baseline="launch/graph", rounds=16)
    frame = cmp.frame(columns, flops=flops)
    frame["host_us"] = [host[v] for v in frame.variant]
    print(f"  {label}: host us per call " + ", ".join(f"{k} {v:.1f}" for k, v in host.items()), flush=True)
    for name, against in pairs:
        for t in (timing.KERNEL, timing.LATENCY):
            r = cmp.ratio(f"launch/{name}", t, against=f"launch/{against}")
            print(f"    {name} / {against}, {t:<8} {r.value:.3f} [{r.lo:.3f}, {r.hi:.3f}] {r.verdict}", flush=True)
    return frame


def kmeans_launch_paths(write: bool = True) -> None:
    """The kernel `auto` runs, called as assign() calls it with an output from a ring of 16 (a new address at
    every call, as when contenders interleave): through a cache whose graphs re-aim c_sq and out, one that keeps
    a graph per address set, and one that launches every call from the template; then the first two with one
    output (a Lloyd loop's), where both replay their graphs as they are. Host time per call and both timings
    (`_time_launch_paths`), recorded in data/measured/h200/kmeans_launch_paths.csv."""
    import pandas as pd

    from kmeans_kernels import bench, hopper
    from workbook import records
    # (cache options, outputs in the ring): a new output address at every call, and one output (a Lloyd loop)
    paths = {"reaimed": (dict(reaimable=(2, 3)), 16), "graph": ({}, 16), "template": (dict(graphs=False), 16),
             "reaimed_one_out": (dict(reaimable=(2, 3)), 1), "graph_one_out": ({}, 1)}
    frames = []
    for N, D, K in LAUNCH_SHAPES:
        sets = bench.input_sets(N, D, K)
        variant = hopper.auto_variant(N, D, K)
        dtype = sets[0][0].dtype
        compiled = hopper._launches(variant, D, dtype, 0, False).compiled
        ctas = hopper.grid_cap(variant, D, 0)
        stream = launch.stream_handle(0)
        fns = {}
        for name, (kw, outs) in paths.items():
            cache = launch.LaunchCache(compiled, device=0, pointers=4, **kw)
            ring = itertools.cycle([torch.empty(N, dtype=torch.int32, device="cuda") for _ in range(outs)])

            def fn(x, c, c_sq, cache=cache, ring=ring):
                out = next(ring)
                addrs = (x.data_ptr(), c.data_ptr(), c_sq.data_ptr(), out.data_ptr(), N, K, ctas)
                cache(addrs, lambda s: hopper._args(dtype, *addrs, hopper.cuda.CUstream(s)), stream)
                return out
            fns[f"launch/{name}"] = fn
        want = torch.empty(N, dtype=torch.int32, device="cuda")
        hopper.run(variant, *sets[0], want)
        frame = _time_launch_paths(fns, sets, f"{N}x{D}x{K} ({variant})", {"N": N, "D": D, "K": K}, 2.0 * N * D * K,
                                   (("reaimed", "graph"), ("template", "graph"), ("reaimed_one_out", "graph_one_out")),
                                   lambda got: torch.equal(got, want))
        frame["auto_variant"] = variant
        frames.append(frame)
    if write:
        print(f"wrote {records.append('h200', 'kmeans_launch_paths', pd.concat(frames, ignore_index=True))}")


GEMM_LAUNCH_SHAPES = ((1024, 1024, 1024), (16, 8192, 4096), (4096, 4096, 4096))


def gemm_launch_paths(write: bool = True) -> None:
    """gemm(a, b) as the rule runs it, its output from a ring of 16 (a new address at every call) and then one
    output: through a cache whose graphs re-aim c (the register epilogue's plain pointer) and one that keeps a
    graph per address set. Host time per call and both timings (`_time_launch_paths`), recorded in
    data/measured/h200/gemm_launch_paths.csv."""
    import pandas as pd

    from workbook import records
    paths = {"reaimed": ((2,), 16), "graph": ((), 16), "reaimed_one_out": ((2,), 1), "graph_one_out": ((), 1)}
    frames = []
    for M, N, K in GEMM_LAUNCH_SHAPES:
        sets = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
                 torch.randn(K, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
        call = hopper_host._call_for(M, N, K, 0)
        if call.cfg.epilogue != "register":
            print(f"  {M}x{N}x{K}: the rule runs the staged epilogue here; nothing to re-aim")
            continue
        stream = launch.stream_handle(0)
        fns = {}
        for name, (reaimable, outs) in paths.items():
            cache = launch.LaunchCache(call.launches.compiled, device=0, pointers=7, reaimable=reaimable)
            ring = itertools.cycle([torch.empty(M, N, device="cuda", dtype=torch.bfloat16) for _ in range(outs)])

            def fn(a, b, cache=cache, ring=ring):
                out = next(ring)
                addrs = (a.data_ptr(), b.data_ptr(), out.data_ptr(), call.work.data_ptr(),
                         *(t.data_ptr() for t in call.scratch(stream)))
                cache(addrs + call.sizes, lambda s: hopper_host._args(call.cfg, *addrs, *call.sizes,
                                                                      hopper_host.cuda_driver.CUstream(s)), stream)
                return out
            fns[f"launch/{name}"] = fn
        want = sets[0][0].float() @ sets[0][1].float()
        frames.append(_time_launch_paths(fns, sets, f"{M}x{N}x{K}", {"M": M, "N": N, "K": K}, 2.0 * M * N * K,
                                         (("reaimed", "graph"), ("reaimed_one_out", "graph_one_out")),
                                         lambda got: ((got.float() - want).norm() / want.norm()).item() <= 1e-2))
    if write and frames:
        print(f"wrote {records.append('h200', 'gemm_launch_paths', pd.concat(frames, ignore_index=True))}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=shape_arg, nargs="+", default=[(1024, 1024, 1024), (16, 8192, 4096)])
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--kmeans-launch", action="store_true", help="re-aimed graphs against graphs per address set and templates")
    p.add_argument("--gemm-launch", action="store_true", help="the GEMM's re-aimed graphs against graphs per address set")
    p.add_argument("--kmeans", action="store_true", help="the k-means assignment instead of the GEMM")
    args = p.parse_args(argv)
    if args.kmeans:
        return kmeans(args.calls)
    if args.kmeans_launch:
        return kmeans_launch_paths()
    if args.gemm_launch:
        return gemm_launch_paths()
    for M, N, K in args.shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        ours = lambda: gemm_kernels.gemm(a, b)            # noqa: E731
        call = hopper_host._call_for(M, N, K, 0)
        stream = launch.stream_handle(0)
        pieces = {
            "gemm(a, b) issue rate": ours,
            "torch.matmul issue rate": lambda: torch.matmul(a, b),
            "hopper_host.gemm(a, b, out=out)": lambda: hopper_host.gemm(a, b, out=out),
            "check_operand x2": lambda: (gemm_kernels.check_operand("a", a, DTYPES),
                                         gemm_kernels.check_operand("b", b, DTYPES)),
            "_operands": lambda: hopper_host._operands(a, b),
            "_call_for": lambda: hopper_host._call_for(M, N, K, 0),
            "rule.options_for": lambda: rule.options_for(M, N, K),
            "torch.empty": lambda: torch.empty((M, N), dtype=torch.bfloat16, device=a.device),
            "a.new_empty": lambda: a.new_empty((M, N)),
            "torch.empty_like(out)": lambda: torch.empty_like(out),
            "stream_handle": lambda: launch.stream_handle(0),
            "on_device": lambda: launch.on_device(0),
            "is_capturing": lambda: launch.is_capturing(stream),
            "_launch (graph launch path)": lambda: hopper_host._launch(call, a, b, out, stream),
            "torch.cuda.current_device": torch.cuda.current_device,
        }
        for _ in range(call.launches.capture_after):       # sighted often enough: now its graph exists
            hopper_host._launch(call, a, b, out, stream)
        graph = next(iter(call.launches._graphed.values()))
        graph = graph.exec if isinstance(graph, launch.Reaimable) else graph
        pieces["cuGraphLaunch"] = lambda: launch.graph_launch(graph, stream)
        # the benchmarks' pattern: three input sets taking turns, a new output each call
        sets = [(torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
                 torch.randn(K, N, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
        turn = itertools.cycle(sets)
        pieces["gemm(a, b), 3 input sets in turn"] = lambda: gemm_kernels.gemm(*next(turn))
        pieces["torch.matmul, 3 input sets in turn"] = lambda: torch.matmul(*next(turn))
        fresh = [torch.empty_like(out) for _ in range(args.calls + 1)]
        pieces["gemm(a, b, out=<a new tensor each call>)"] = lambda: hopper_host.gemm(a, b, out=fresh.pop())
        print(f"\n{M}x{N}x{K}: rule picks {rule.choose(M, N, K)!r}")
        for name, fn in pieces.items():
            us = per_call_us(fn, args.calls)
            torch.cuda.synchronize()
            print(f"  {name:<34} {us:8.2f} us per call")
        gpu = sweep.gpu_ms({"ours": ours, "torch": lambda: torch.matmul(a, b)}, [()], calls=200)
        for name, ms in gpu.items():
            print(f"  GPU time per call, {name:<5} {1e3 * ms:8.2f} us")


if __name__ == "__main__":
    main()
