"""The shapes users run, by class, and the sweep that times every candidate configuration on them beside
torch.matmul (cuBLAS): the data the per-shape rule (`gemm_kernels.rule`) is learned from.

    python -m gemm_kernels.sweep                       # every class, every candidate (H100/H200: the odd class,
                                                       # 14 shapes x 32 contenders, took 6 minutes on an H100)
    python -m gemm_kernels.sweep --classes odd --candidates "*swapped"   # candidates added later (by name or
                                                       # pattern): their ratios join the others' (`rule.latest_run`)
    python -m gemm_kernels.sweep --default-only        # gemm(a, b) as shipped (the rule) vs torch.matmul, on the
                                                       # swept shapes and on HELD_OUT ones (column held_out)
    WORKBOOK_RUN_DATE=2026-12-06T08:00:00Z python -m gemm_kernels.sweep --classes skinny --part 1/2   # then 2/2:
                                                       # one run in two processes (a lent GPU's calls are short)

    sweep.SHAPES["skinny"]          # [(M, N, K), ...] of one class
    sweep.classes_of(16, 4096, 4096)  # ("skinny",)

Method (`workbook.timing.compare`, DESIGN.md): three seeded bf16 input sets rotated over all calls; torch.matmul
and every candidate (`gemm_kernels.configs.HOPPER_CANDIDATES`) warmed up, then interleaved rounds in a rotating
order, each round giving every contender a few synchronised, CUDA-event-timed calls (the latency a user sees)
and as many back to back (the kernel's own time); each ratio to torch.matmul is formed round by round and
summarised by its median with a bootstrap 95 % interval. The number of calls per round follows the shape's
expected time (a round lasts a few milliseconds), so small shapes get many calls and large ones few. Each
contender's first input set is checked against an fp32 reference (`match_rate` 1 within the bf16 band). A third
timing, "gpu", is each contender's kernel durations per call from a CUPTI trace (`gpu_ms`): at small shapes the
host, not the GPU, sets the pace of back-to-back calls, and only this timing still tells configurations apart.

Rows go, shape by shape, to data/measured/<gpu>/gemm_config_sweep.csv (`workbook.records`): one per contender
and timing, with the shape's class and the ratio of its time to torch.matmul's (< 1: ours is faster). Shapes
run in order of expected time, the cheapest first, so an interrupted sweep keeps most shapes.
"""
from __future__ import annotations

import argparse
import itertools

TABLE = "gemm_config_sweep"
DEFAULT_TABLE = "gemm_rule_check"
TORCH = ("torch", "torch.matmul")
GPU = "gpu"             # the third timing: kernel durations from a CUPTI trace (`gpu_ms`)
GPU_CALLS = 20
REL_TOL = 1e-2
ROUNDS = 10
ROUND_MS = 2.0          # a contender's calls in one round take about this long
CALLS = (3, 10)         # fewest and most calls per round

_SIDES = (1024, 2048, 4096, 8192, 16384)
SHAPES = {
    "square": [(s, s, s) for s in (1024, 1536, 2048, 3072, 4096, 5120, 6144, 8192, 10240, 12288, 16384)],
    "rectangle": [(M, N, K) for K in (1024, 4096, 8192) for M, N in itertools.product(_SIDES, repeat=2) if M != N],
    "skinny": [(M, N, K) for M in (16, 64, 128, 256, 512) for N in (4096, 8192, 14336) for K in (4096, 8192, 14336)],
    "k-heavy": [(1024, 1024, 8192), (1024, 1024, 32768), (2048, 2048, 16384), (2048, 1024, 16384),
                (1024, 4096, 16384), (4096, 1024, 16384), (4096, 4096, 16384), (512, 2048, 16384),
                (2048, 1024, 8192), (1024, 2048, 8192), (1536, 1024, 8192), (2048, 2048, 8192), (1024, 1024, 16384),
                (3072, 1024, 16384), (1024, 3072, 16384), (3072, 3072, 12288), (6144, 1024, 32768)],
    "odd": [(1000, 1000, 1000), (3000, 3000, 3000), (5000, 5000, 5000), (7000, 7000, 7000), (4097, 4104, 4104),
            (2500, 6000, 4000), (10000, 10000, 1000), (1234, 5672, 3000), (2000, 2000, 2000), (1200, 2400, 3600),
            (3500, 1800, 2712), (6000, 6000, 3000), (800, 5000, 3000), (2999, 2000, 4000)],
}

# Shapes of each class that the sweep never measured: `--default-only` times gemm(a, b) on them too, so that the
# rule is judged on problems it was not learned from (column `held_out`).
HELD_OUT = {
    "square": [(2560, 2560, 2560), (7168, 7168, 7168), (14336, 14336, 14336)],
    "rectangle": [(3072, 12288, 4096), (6144, 2048, 4096), (12288, 3072, 8192), (1536, 6144, 1024)],
    "skinny": [(32, 6144, 4096), (96, 12288, 8192), (384, 5120, 10240), (200, 4096, 6144)],
    "k-heavy": [(1536, 1536, 12288), (768, 3072, 16384), (3072, 1024, 24576)],
    "odd": [(1500, 2504, 3000), (6000, 3000, 2000), (999, 7000, 5000)],
}


def classes_of(M: int, N: int, K: int) -> tuple[str, ...]:
    """The classes a shape belongs to by the issue's definitions (a shape may be in none or in several)."""
    found = []
    if M == N == K:
        found.append("square")
    if 1024 <= min(M, N) and max(M, N) <= 16384 and M != N and K in (1024, 4096, 8192):
        found.append("rectangle")
    if M <= 512 and N >= 4096 and K >= 4096:
        found.append("skinny")
    if K >= 4 * max(M, N):
        found.append("k-heavy")
    if all(v % 64 for v in (M, N, K)) or any(v % 8 for v in (M,)):
        found.append("odd")
    return tuple(found)


def all_shapes(classes=None, tables=(SHAPES,)) -> list[tuple[str, tuple[int, int, int]]]:
    """(class, shape) pairs of the chosen classes (default all) of each of `tables` (SHAPES; with HELD_OUT too,
    the rule check's), each shape once (under its first class), cheapest first by `expected_ms`."""
    seen, found = set(), []
    for table in tables:
        for name in classes or table:
            if name not in table:
                raise ValueError(f"unknown class {name!r}; choose from {list(table)}")
            for shape in table[name]:
                if shape not in seen:
                    seen.add(shape)
                    found.append((name, shape))
    return sorted(found, key=lambda cs: expected_ms(*cs[1]))


def expected_ms(M: int, N: int, K: int, tflops: float = 600.0, overhead_us: float = 8.0) -> float:
    """A rough time per call on an H200 (tensor pipe at `tflops`, plus launch): to size the rounds."""
    return 2.0 * M * N * K / (tflops * 1e9) + overhead_us * 1e-3


def calls_per_round(M: int, N: int, K: int) -> int:
    lo, hi = CALLS
    return max(lo, min(hi, round(ROUND_MS / expected_ms(M, N, K))))


def estimate_minutes(shapes, contenders: int, rounds: int = ROUNDS, warmup: int = 3) -> float:
    """GPU minutes for a sweep: every contender's warm-up plus, per round, both timings of its calls (+1 settle)."""
    total = 0.0
    for M, N, K in shapes:
        calls = calls_per_round(M, N, K)
        total += contenders * (warmup + rounds * 2 * (calls + 1)) * (expected_ms(M, N, K) + 0.02)
    return total / 60e3


def measure_shape(fns: dict, M: int, N: int, K: int, cls: str, rounds: int = ROUNDS, **columns):
    """One shape: every contender checked on the first input set, then `compare`d with torch.matmul; `columns`
    are added to every row."""
    import torch

    from gemm_kernels.bench import input_sets
    from workbook import timing
    sets = input_sets(M, N, K)
    a, b = sets[0]
    ref = a.float() @ b.float()
    ok, match = {}, {}
    for name, fn in fns.items():
        try:
            err = ((fn(a, b).float() - ref).norm() / ref.norm()).item()
        except ValueError as e:                   # a candidate that refuses the shape is left out of it
            print(f"{M}x{N}x{K}: {name[1]} refused: {e}", flush=True)
            continue
        ok[name], match[name] = fn, float(err < REL_TOL)
    del ref
    cmp = timing.compare(ok, sets, baseline=TORCH, rounds=rounds, calls=calls_per_round(M, N, K), warmup=3)
    frame = cmp.frame({"class": cls, "M": M, "N": N, "K": K, **columns}, flops=2.0 * M * N * K, match_rate=match)
    try:
        gpu = gpu_ms(ok, sets)
    except RuntimeError as e:                     # no CUPTI trace: the two host-side timings still stand
        print(f"{M}x{N}x{K}: no gpu timing: {e}", flush=True)
        del sets
        return frame
    extra = frame[frame.timing == "kernel"].copy()
    extra["timing"] = GPU
    extra["ms_median"] = extra.apply(lambda r: gpu[r.kernel, r.variant], axis=1)
    extra["ratio"] = extra.ms_median / gpu[TORCH]
    extra["tflops"] = 2.0 * M * N * K / (extra.ms_median * 1e9)
    extra["ms_min"] = extra["ms_max"] = extra.ms_median     # one trace gives one mean per contender
    for col in ("ms_lo", "ms_hi", "ratio_lo", "ratio_hi"):
        extra[col] = float("nan")
    extra["verdict"], extra["rounds"], extra["calls"] = "", 1, GPU_CALLS
    del sets
    torch.cuda.empty_cache()
    import pandas as pd
    return pd.concat([frame, extra], ignore_index=True)


def gpu_ms(fns: dict, sets, calls: int = GPU_CALLS) -> dict:
    """Each contender's GPU time per call (ms): the durations of every kernel its calls ran, from one CUPTI trace
    (torch.profiler), summed and divided by `calls`. No host time is in it: where the host cannot issue calls as
    fast as the GPU runs them (small shapes), back-to-back timing measures the host; this does not. Contenders
    run one after the other, each block of calls closed by a marker kernel (`torch.cuda._sleep`), and the trace's
    kernels are cut at the markers."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    names = list(fns)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for name in names:
            for i in range(calls):
                fns[name](*sets[i % len(sets)])
            torch.cuda._sleep(1000)
        torch.cuda.synchronize()
    kernels = sorted((e.time_range.start, e.device_time, e.name) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA)
    found, block, total = {}, 0, 0.0
    for _, us, kname in kernels:
        if _is_marker(kname):
            found[names[block]] = total / 1e3 / calls
            block, total = block + 1, 0.0
            if block == len(names):
                break
        else:
            total += us
    if len(found) != len(names):
        raise RuntimeError(f"the GPU trace has {block} of {len(names)} marker kernels: cannot attribute its kernels")
    return found


def _is_marker(kernel_name: str) -> bool:
    return "spin" in kernel_name.lower() or "sleep" in kernel_name.lower()


def contenders(candidates=None, default_only: bool = False) -> dict:
    """{(kernel, variant): fn(a, b)}: torch.matmul and each chosen candidate (or gemm() as shipped)."""
    import torch

    import gemm_kernels
    from gemm_kernels import configs
    fns = {TORCH: torch.matmul}
    if default_only:
        fns["ours", "gemm() default"] = gemm_kernels.gemm
        return fns
    for name in candidates or configs.HOPPER_CANDIDATES:
        options = configs.HOPPER_CANDIDATES[name]
        fns["ours", name] = lambda a, b, options=options: gemm_kernels.gemm(a, b, options)
    return fns


def candidate_names(given) -> list[str]:
    """The names of configs.HOPPER_CANDIDATES that `given` names, each as a name or a shell-style pattern
    ("*swapped"), in the candidates' order; ValueError for one that names none."""
    import fnmatch

    from gemm_kernels import configs
    for g in given:
        if not fnmatch.filter(configs.HOPPER_CANDIDATES, g):
            raise ValueError(f"{g!r} names no configuration of configs.HOPPER_CANDIDATES")
    return [name for name in configs.HOPPER_CANDIDATES if any(fnmatch.fnmatchcase(name, g) for g in given)]


def _part(text: str) -> tuple[int, int]:
    """"K/N" -> (K, N) with 1 <= K <= N (argparse's type for --part)."""
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--part takes K/N, like 1/2; got {text!r}") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"--part K/N needs 1 <= K <= N, got {text!r}")
    return k, n


def main(argv=None):
    from gemm_kernels import configs
    p = argparse.ArgumentParser(prog="python -m gemm_kernels.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--classes", nargs="+", choices=list(SHAPES), help="shape classes (default: all)")
    p.add_argument("--candidates", nargs="+", metavar="NAME",
                   help="configurations to time, by name or shell-style pattern (\"*swapped\"); default: all of "
                        "configs.HOPPER_CANDIDATES")
    p.add_argument("--default-only", action="store_true",
                   help=f"time gemm(a, b) with no options (the per-shape rule) against torch.matmul; table "
                        f"{DEFAULT_TABLE}")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds per shape (default {ROUNDS})")
    p.add_argument("--part", type=_part, default=(1, 1), metavar="K/N",
                   help="time only the K-th of N interleaved parts of the shapes (give every part's process one "
                        "WORKBOOK_RUN_DATE, so that their rows read back as one run)")
    p.add_argument("--estimate", action="store_true", help="print the expected GPU minutes and stop")
    p.add_argument("--no-record", action="store_true", help="print only; do not append to data/measured")
    args = p.parse_args(argv)
    if args.candidates:
        try:
            args.candidates = candidate_names(args.candidates)
        except ValueError as e:
            p.error(str(e))
    if args.rounds < 2:
        p.error("--rounds must be >= 2 (an interval needs rounds)")
    shapes = all_shapes(args.classes, (SHAPES, HELD_OUT) if args.default_only else (SHAPES,))
    part, parts = args.part
    shapes = shapes[part - 1::parts]
    fns_count = 2 if args.default_only else 1 + len(args.candidates or configs.HOPPER_CANDIDATES)
    minutes = estimate_minutes([s for _, s in shapes], fns_count, args.rounds)
    print(f"{len(shapes)} shapes x {fns_count} contenders: about {minutes:.1f} GPU minutes", flush=True)
    if args.estimate:
        return
    from workbook import gpus, records
    spec = gpus.current()
    if spec is None or spec.arch != "sm_90a":
        raise SystemExit("gemm_kernels.sweep times the Hopper GEMM and needs an H100/H200; recorded sweeps: "
                         f"data/measured/h200/{TABLE}.csv")
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False      # the fp32 reference stays fp32
    fns = contenders(args.candidates, args.default_only)
    table = DEFAULT_TABLE if args.default_only else TABLE
    frames = []
    held_out = {shape for group in HELD_OUT.values() for shape in group}
    for i, (cls, (M, N, K)) in enumerate(shapes):
        extra = {"held_out": (M, N, K) in held_out} if args.default_only else {}
        frame = measure_shape(fns, M, N, K, cls, args.rounds, **extra)
        if not args.no_record:
            records.append(spec.key, table, frame)
        frames.append(frame)
        kern = frame[frame.timing == "kernel"].set_index("variant")
        best = kern.drop("torch.matmul").ratio.idxmin()
        print(f"[{i + 1}/{len(shapes)}] {cls:>9} {M}x{N}x{K}: best {best} at "
              f"{100 / kern.ratio[best]:.1f}% of torch (kernel)", flush=True)
    if frames:
        import pandas as pd
        from gemm_kernels import rule
        print("\n" + rule.class_summary(pd.concat(frames)).to_string())


if __name__ == "__main__":
    main()
