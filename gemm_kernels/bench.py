"""Time our GEMM, one configuration per step, beside torch.matmul (cuBLAS), by the seeds' method.

    python -m gemm_kernels.bench                      # this GPU: H200 -> 4096^3, 8192^3, 16384^3 + poor-wave shapes
    python -m gemm_kernels.bench --gpu b200           # the seed's benchmark on a B200 (refuses on any other GPU)
    python -m gemm_kernels.bench --shapes 4096x4096x4096 --no-record

Method (the seeds', `workbook.timing`): three independently seeded input sets rotated between calls, 10 warm-up calls, the
median of 30 CUDA-event-timed calls, with torch.matmul and every configuration taking turns call by call,
the order rotating (`workbook.timing.bench_interleaved`: the GPU's clock drifts as it heats, and
one-after-the-other timing hands that drift to whoever runs last); every input set is checked
against an fp32 reference first (`match_rate` = the fraction of sets within the bf16 band, ||c - ref|| / ||ref|| < 1e-2).
Rows go to data/measured/<gpu>/gemm.csv (`workbook.records`): kernel "ours" or "torch", variant = the
configuration, M, N, K, TFLOP/s = 2MNK / median time. The configurations are `gemm_kernels.configs`: on an
H200 `HOPPER` (each step of the story), on a B200 `BLACKWELL` (4-stage staged, 7-stage register, 7-stage
register balanced). Each shape's rows are recorded as soon as they are measured, so an interrupted or failing
run keeps them; every --shapes entry is checked before anything runs.

First calls (``--first-calls``, on by default): `gemm_kernels.gemm` (default options) and torch.matmul on
inputs they have never seen, as training-style code brings them (`workbook.launch.first_calls`: each call on
fresh tensors), next to the steady state on one repeated input set; rows in gemm_first_call.csv (column
``inputs``: "fresh" or "repeated").
"""
from __future__ import annotations

import argparse
import itertools

import torch

import gemm_kernels
from gemm_kernels import configs, hopper_options

REL_TOL = 1e-2
SQUARE = (4096, 8192, 16384)
SWEEP_SIDES = range(2048, 8193, 512)
SWEEP_K = 8192
FIRST_CALL_TABLE = "gemm_first_call"
FIRST_CALL_BYTES = 16 << 30      # fresh input sets held at once for the first-call timing, at most


def sweep_shapes():
    """Every (M, N) in SWEEP_SIDES^2 at K = SWEEP_K: the grid over which wave quantisation comes and goes
    (169 shapes; `--sweep` times torch.matmul and our default on each, into the table gemm_sweep)."""
    return [(M, N, SWEEP_K) for M in SWEEP_SIDES for N in SWEEP_SIDES]


def poor_wave_shapes(count: int = 3, K: int = 8192, gpu=None):
    """The (M, N, K) where the planner predicts the largest gain from balancing the default configuration's
    128x256 tiles on its CTA pairs (>= 2 waves)."""
    default = configs.HOPPER[configs.HOPPER_DEFAULT]
    found = []
    for M, N in itertools.product(range(2048, 8193, 512), repeat=2):
        uniform = hopper_options.plan_for(M, N, default, gpu, schedule="uniform")
        balanced = hopper_options.plan_for(M, N, default, gpu, schedule="balanced")
        if uniform.waves >= 2:
            found.append((uniform.makespan / balanced.makespan, M * N, M, N))
    found.sort(key=lambda t: (-t[0], -t[1]))
    picked, seen = [], set()
    for gain, _, M, N in found:     # one shape per predicted gain, the largest first, no transposed twins
        if round(gain, 3) in seen or (N, M) in {(m, n) for m, n, _ in picked}:
            continue
        seen.add(round(gain, 3))
        picked.append((M, N, K))
        if len(picked) == count:
            break
    return picked


def input_sets(M: int, N: int, K: int, n: int = 3, seed: int = 1234):
    sets = []
    for i in range(n):
        g = torch.Generator(device="cuda").manual_seed(seed + i)
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16, generator=g)
        sets.append((a, b))
    return sets


def rel_error(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    ref = a.float() @ b.float()
    return ((c.float() - ref).norm() / ref.norm()).item()


def measure(contenders: dict, sets, M: int, N: int, K: int) -> list[dict]:
    """Rows for {(kernel, name): fn}, timed together, taking turns (workbook.timing.bench_interleaved)."""
    from workbook import timing
    errors = {key: [rel_error(fn(a, b), a, b) for a, b in sets] for key, fn in contenders.items()}
    timings = timing.bench_interleaved(contenders, sets, warmup=10, iters=30)
    rows = []
    for (kernel, name), t in timings.items():
        errs = errors[kernel, name]
        rows.append(dict(kernel=kernel, variant=name, M=M, N=N, K=K, ms_median=t.ms_median, ms_min=t.ms_min,
                         ms_max=t.ms_max, tflops=t.tflops(2.0 * M * N * K),
                         match_rate=sum(e < REL_TOL for e in errs) / len(errs), max_rel_err=max(errs)))
    return rows


def contenders(arch: str) -> dict:
    """name -> (gemm function, Options) of every configuration timed on this arch, in story order
    (`gemm_kernels.configs`). The backend modules need CuTe DSL: imported only here."""
    fn = gemm_kernels.backend(arch).gemm
    return {name: (fn, options) for name, options in configs.for_arch(arch).items()}


def default_shapes(arch: str):
    squares = [(s, s, s) for s in SQUARE]
    # the seed measured the three squares on B200; on Hopper we add the shapes where balancing should pay
    return squares if arch == "sm_100a" else squares + poor_wave_shapes()


def first_call_rows(M: int, N: int, K: int, calls: int) -> list[dict]:
    """Rows of `gemm_kernels.gemm` (its defaults) and torch.matmul on fresh inputs and on repeated ones."""
    from workbook import launch
    calls = max(3, min(calls, FIRST_CALL_BYTES // ((M * K + K * N + M * N) * 2)))
    make_inputs = lambda i: input_sets(M, N, K, n=1, seed=5000 + i)[0]   # noqa: E731
    found = launch.first_calls({("ours", "gemm() defaults"): gemm_kernels.gemm, ("torch", "torch.matmul"): torch.matmul},
                               make_inputs, calls)
    rows = []
    for (kernel, variant), (first, steady, outputs) in found.items():
        errors = [rel_error(c, *make_inputs(i)) for i, c in enumerate(outputs[:3])]
        for inputs, t in (("fresh", first), ("repeated", steady)):
            rows.append(dict(kernel=kernel, variant=variant, M=M, N=N, K=K, inputs=inputs, ms_median=t.ms_median,
                             ms_min=t.ms_min, ms_max=t.ms_max, tflops=t.tflops(2.0 * M * N * K),
                             match_rate=sum(e < REL_TOL for e in errors) / len(errors), max_rel_err=max(errors)))
    return rows


def run(shapes, chosen: dict, gpu_key: str, record: bool = True, out_csv=None, table: str = "gemm",
        first_calls: int = 0):
    torch.backends.cuda.matmul.allow_tf32 = False    # the fp32 reference stays fp32
    from workbook import records
    rows, first_rows = [], []
    for M, N, K in shapes:
        sets = input_sets(M, N, K)
        contenders = {("torch", "torch.matmul"): torch.matmul}
        for name, (fn, options) in chosen.items():
            contenders["ours", name] = lambda a, b, fn=fn, options=options: fn(a, b, options)
        measured = measure(contenders, sets, M, N, K)
        for r in measured:
            print(_line(r, _torch(measured, M, N, K)), flush=True)
        del sets
        if record:                                   # this shape's rows, now: a later failure keeps them
            records.append(gpu_key, table, measured)
        rows += measured
        if out_csv:
            import pandas as pd
            pd.DataFrame(rows).to_csv(out_csv, index=False)
        if first_calls:
            shape_first = first_call_rows(M, N, K, first_calls)
            if record:
                records.append(gpu_key, FIRST_CALL_TABLE, shape_first)
            first_rows += shape_first
        torch.cuda.empty_cache()
    return rows, first_rows


def _torch(rows, M, N, K) -> float:
    return next(r["tflops"] for r in rows if r["kernel"] == "torch" and (r["M"], r["N"], r["K"]) == (M, N, K))


def _line(r, torch_tflops: float) -> str:
    return (f"{r['M']:>6} x {r['N']:>6} x {r['K']:>6}  {r['variant']:<42} {r['ms_median']:9.4f} ms "
            f"{r['tflops']:7.1f} TFLOP/s  {100 * r['tflops'] / torch_tflops:6.1f}% of torch  "
            f"rel err {r['max_rel_err']:.2e}")


def shape_arg(text: str):
    """An MxNxK command-line shape (argparse `type=`), refused at parse time (before anything runs) unless a GEMM
    can take its sizes."""
    try:
        M, N, K = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must be MxNxK, got {text!r}") from None
    try:
        gemm_kernels.check_sizes(M=M, N=N, K=K)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text}: {e}") from None
    return M, N, K


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m gemm_kernels.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=shape_arg, nargs="+", help="MxNxK shapes (default: squares + poor-wave shapes)")
    p.add_argument("--variants", nargs="+", metavar="NAME",
                   help="configurations to time (default: all of this GPU's); on H200: " + "; ".join(configs.HOPPER))
    p.add_argument("--gpu", choices=("h200", "b200"), default=None,
                   help="the GPU the numbers are for; refuses to run on any other")
    p.add_argument("--torch-only", action="store_true",
                   help="time torch.matmul alone (a ceiling for any product shape; needs no CuTe DSL)")
    p.add_argument("--sweep", action="store_true",
                   help=f"torch.matmul and our default on every M, N in {SWEEP_SIDES.start}..{SWEEP_SIDES.stop - 1} "
                        f"step {SWEEP_SIDES.step} at K={SWEEP_K} (Hopper; table gemm_sweep)")
    p.add_argument("--first-calls", type=int, default=20, metavar="CALLS",
                   help="calls on fresh inputs per shape for the first-call timing of the default configuration "
                        "(0: skip it; default 20; not with --sweep or --torch-only)")
    p.add_argument("--no-record", action="store_true", help="print only; do not append to data/measured")
    p.add_argument("--csv", help="also write the rows to this CSV file")
    args = p.parse_args(argv)
    if args.first_calls < 0:
        p.error(f"--first-calls must be >= 0, got {args.first_calls}")
    unaligned = [f"{M}x{N}x{K}" for M, N, K in args.shapes or () if N % 8 or K % 8]
    if unaligned and not args.torch_only:      # refused before anything runs, not at that shape's turn
        p.error(f"--shapes {' '.join(unaligned)}: our kernels need N and K multiples of 8 (TMA's 16-byte rows)")
    from workbook import gpus
    spec = gpus.current()
    if spec is None:
        raise SystemExit("gemm_kernels.bench needs a GPU (H100/H200 or B200); none is present. "
                         "Recorded numbers: data/measured/h200/gemm.csv")
    if args.gpu is not None and spec.key != args.gpu:
        raise SystemExit(f"asked for {args.gpu}, but this machine has {spec.name} ({spec.arch}): a {args.gpu} "
                         f"number can only be measured on a {args.gpu}. Run without --gpu to measure this GPU.")
    if spec.arch not in ("sm_90a", "sm_100a"):
        raise SystemExit(f"{spec.name} is {spec.arch}: our GEMM kernels are built for sm_90a and sm_100a only")
    available = {} if args.torch_only else contenders(spec.arch)
    unknown = sorted(set(args.variants or ()) - set(available))
    if unknown:
        raise SystemExit(f"unknown configurations {unknown} for {spec.arch}; choose from {sorted(available)}")
    if args.sweep:
        if spec.arch != "sm_90a" or args.shapes:
            raise SystemExit("--sweep is the Hopper shape grid; it takes no --shapes and needs an H100/H200")
        args.variants = args.variants or ([] if args.torch_only else [configs.HOPPER_DEFAULT])
    chosen = {name: available[name] for name in (args.variants if args.variants is not None else available)}
    if args.torch_only and not (args.shapes or args.sweep):
        raise SystemExit("--torch-only needs --shapes")
    shapes = sweep_shapes() if args.sweep else args.shapes or default_shapes(spec.arch)
    rows, first_rows = run(shapes, chosen, spec.key, record=not args.no_record, out_csv=args.csv,
                           table="gemm_sweep" if args.sweep else "gemm",
                           first_calls=0 if args.sweep or args.torch_only else args.first_calls)
    print("\nTFLOP/s (% of torch.matmul):")
    for (M, N, K), group in itertools.groupby(rows, key=lambda r: (r["M"], r["N"], r["K"])):
        group = list(group)
        base = _torch(group, M, N, K)
        cells = "  ".join(f"{r['variant'].replace(' uniform', '')}: {r['tflops']:.0f} ({100 * r['tflops'] / base:.0f}%)"
                          for r in group)
        print(f"{M}x{N}x{K}: {cells}")
    if first_rows:
        print("\nfirst call on fresh inputs vs repeated inputs (ms, median):")
        for (M, N, K), group in itertools.groupby(first_rows, key=lambda r: (r["M"], r["N"], r["K"])):
            cells = "  ".join(f"{r['kernel']} {r['inputs']}: {r['ms_median']:.4f}" for r in group)
            print(f"{M}x{N}x{K}: {cells}")


if __name__ == "__main__":
    main()
