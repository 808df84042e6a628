"""Time k-means assignment kernels on the seed shapes, by the seeds' method, and record the rows.

    python -m kmeans_kernels.bench                      # this GPU's backend, every variant, torch, flashlib
    python -m kmeans_kernels.bench --gpu b200           # says so and stops unless a B200 is present
    python -m kmeans_kernels.bench --shapes 65536,128,4096 --kernels ours,torch --no-record

Method (seed 000): three input sets drawn with seeds 17, 29, 43 and rotated between calls; 10 warm-up
calls, then the median of 30 calls timed with CUDA events, the kernels taking turns call by call (the order
rotating) so that the GPU's clock drift is shared out rather than charged to whichever kernel comes last
(workbook.timing.bench_interleaved); correctness on the first 2048 rows of every set against the fp32
reference (kmeans_kernels.reference), reported as the lowest match rate of the three. Every kernel gets the
same precomputed ||c||^2, as in a Lloyd loop.

Kernels:

* ``ours``: every variant of this GPU's backend, and ``auto`` (what `kmeans_kernels.assign` picks);
* ``torch``: what a user writes, ``(0.5 * c_sq - (x @ c.T).float()).argmin(1)``, the product in bf16
  (so its match rate is below 1: its scores are rounded to bf16);
* ``flashlib`` (only when importable; the package never depends on it): its Hopper CuTe DSL kernel
  ``cutedsl_assign_euclid`` (autotuned per shape on first call, which the warm-up absorbs) and its Triton
  kernel ``euclid_assign_triton``.

Rows go to data/measured/<gpu>/kmeans_assign.csv via workbook.records, shape by shape as they are measured,
so an interrupted or failing run keeps what it measured. Every --shapes entry is checked before anything runs.

First calls (``--first-calls``, on by default): what `kmeans_kernels.assign` (auto) and torch cost on inputs
they have never seen, as training-style code brings them (`workbook.launch.first_calls`: each call on fresh
tensors), next to the steady state on one repeated input set; rows in kmeans_first_call.csv (column
``inputs``: "fresh" or "repeated").
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch

import kmeans_kernels
from kmeans_kernels import reference
from workbook import DATA, gpus, launch, records, timing

SEEDS = (17, 29, 43)
CHECK_ROWS = 2048
TABLE = "kmeans_assign"
FIRST_CALL_TABLE = "kmeans_first_call"
FIRST_CALL_BYTES = 16 << 30      # fresh input sets held at once for the first-call timing, at most
SEED_SHAPES = DATA / "pr" / "kmeans_pr22_main.csv"


def seed_shapes() -> list[tuple[int, int, int]]:
    """The 13 shapes of seed 000's tables, (N, D, K)."""
    df = pd.read_csv(SEED_SHAPES)
    return [(int(r.N), int(r.D), int(r.K)) for r in df.itertuples()]


def input_sets(N: int, D: int, K: int, dtype=torch.bfloat16):
    sets = []
    for seed in SEEDS:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(N, D, generator=gen, device="cuda").to(dtype)
        c = torch.randn(K, D, generator=gen, device="cuda").to(dtype)
        sets.append((x, c, reference.centroid_norms(c)))
    return sets


def match_rate(fn, sets) -> float:
    """Lowest, over the input sets, fraction of the first CHECK_ROWS rows equal to the fp32 reference."""
    rates = []
    for x, c, c_sq in sets:
        rows = min(CHECK_ROWS, x.shape[0])
        got = fn(x, c, c_sq).reshape(-1)[:rows].long()
        want = reference.assign(x[:rows], c, c_sq).long()
        rates.append((got == want).float().mean().item())
    return min(rates)


def contenders(arch: str, kernels: set[str], flashlib_autotune: bool):
    """(kernel, variant, fn(x, c, c_sq) -> ids) for everything to time on this GPU."""
    out = []
    if "ours" in kernels:
        be = kmeans_kernels.backend(arch)
        for variant in (*be.VARIANTS, "auto"):
            def ours(x, c, c_sq, variant=variant):
                return kmeans_kernels.assign(x, c, variant=variant, c_sq=c_sq)
            out.append(("ours", variant, ours))
    if "torch" in kernels:
        def torch_assign(x, c, c_sq):
            return (0.5 * c_sq - (x @ c.t()).float()).argmin(1)
        out.append(("torch", "matmul_argmin", torch_assign))
    if "flashlib" in kernels:
        try:
            from flashlib.primitives.kmeans.cutedsl.assign import cutedsl_assign_euclid
            from flashlib.primitives.kmeans.triton.assign import euclid_assign_triton
        except Exception as e:  # noqa: BLE001 - any import failure means: not available here
            print(f"flashlib not importable ({type(e).__name__}: {e}); skipping it", flush=True)
        else:
            def flash_cute(x, c, c_sq):
                return cutedsl_assign_euclid(x[None], c[None], c_sq=c_sq, autotune=flashlib_autotune)
            def flash_triton(x, c, c_sq):
                return euclid_assign_triton(x[None], c[None], c_sq=c_sq[None])
            out.append(("flashlib", "cute" if flashlib_autotune else "cute_heuristic", flash_cute))
            out.append(("flashlib", "triton", flash_triton))
    return out


def parse_shapes(text: str | None) -> list[tuple[int, int, int]]:
    """'N,D,K;N,D,K;...' (default: the seed shapes), every entry checked against what the kernels take."""
    if not text:
        return seed_shapes()
    shapes = []
    for item in text.split(";"):
        parts = item.split(",")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"--shapes wants 'N,D,K;N,D,K;...', got {item!r}")
        N, D, K = (int(p) for p in parts)
        try:
            kmeans_kernels.check_sizes(N=N, D=D, K=K)
        except ValueError as e:
            raise ValueError(f"--shapes entry {item!r}: {e}") from None
        shapes.append((N, D, K))
    return shapes


def first_call_rows(N: int, D: int, K: int, calls: int) -> list[dict]:
    """Rows of `kmeans_kernels.assign` (auto) and torch on fresh inputs and on repeated ones (module doc)."""
    set_bytes = (N + K) * D * 2 + (N + K) * 4
    calls = max(3, min(calls, FIRST_CALL_BYTES // set_bytes))

    def make_inputs(i):
        gen = torch.Generator(device="cuda").manual_seed(1000 + i)
        x = torch.randn(N, D, generator=gen, device="cuda").to(torch.bfloat16)
        c = torch.randn(K, D, generator=gen, device="cuda").to(torch.bfloat16)
        return x, c, reference.centroid_norms(c)

    fns = {("ours", "auto"): lambda x, c, c_sq: kmeans_kernels.assign(x, c, c_sq=c_sq),
           ("torch", "matmul_argmin"): lambda x, c, c_sq: (0.5 * c_sq - (x @ c.t()).float()).argmin(1)}
    found = launch.first_calls(fns, make_inputs, calls)
    rows, checked = [], [make_inputs(i) for i in range(min(calls, 3))]
    for (kernel, variant), (first, steady, outputs) in found.items():
        rates = [(out.reshape(-1)[:CHECK_ROWS].long() == reference.assign(x[:CHECK_ROWS], c, c_sq).long())
                 .float().mean().item() for out, (x, c, c_sq) in zip(outputs, checked)]
        for inputs, t in (("fresh", first), ("repeated", steady)):
            rows.append(dict(kernel=kernel, variant=variant, N=N, D=D, K=K, inputs=inputs, ms_median=t.ms_median,
                             ms_min=t.ms_min, ms_max=t.ms_max, tflops=t.tflops(2.0 * N * D * K),
                             match_rate=min(rates)))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kmeans_kernels.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", choices=("h200", "b200"), default=None,
                    help="the GPU this run is for; refuses to run on any other (default: the one present)")
    ap.add_argument("--shapes", default=None, help="'N,D,K;...' (default: the 13 seed shapes)")
    ap.add_argument("--kernels", default="ours,torch,flashlib", help="comma list of ours, torch, flashlib")
    ap.add_argument("--no-flashlib-autotune", action="store_true",
                    help="use flashlib's static tile heuristic instead of its per-shape autotune (faster)")
    ap.add_argument("--first-calls", type=int, default=20, metavar="CALLS",
                    help="calls on fresh inputs per shape for the first-call timing (0: skip it; default 20)")
    ap.add_argument("--no-record", action="store_true", help="print only; append nothing to data/measured/")
    args = ap.parse_args(argv)
    try:
        shapes = parse_shapes(args.shapes)           # a bad entry is refused before anything runs
    except ValueError as e:
        ap.error(str(e))
    if args.first_calls < 0:
        ap.error(f"--first-calls must be >= 0, got {args.first_calls}")
    kernels = {k.strip() for k in args.kernels.split(",") if k.strip()}
    unknown = kernels - {"ours", "torch", "flashlib"}
    if unknown:
        ap.error(f"unknown --kernels {sorted(unknown)}")

    spec = gpus.current()
    if spec is None:
        recorded = [str(p.relative_to(DATA.parent)) for p in (records.path(g, TABLE) for g in ("h200", "b200"))
                    if p.exists()]
        print("no CUDA GPU here: the benchmark times kernels live and cannot run. "
              + (f"Recorded results: {', '.join(recorded)}." if recorded else "No results are recorded yet."))
        return 2
    if args.gpu is not None and spec.key != args.gpu:
        print(f"asked for {args.gpu}, but this machine has {spec.name} ({spec.arch}): a {args.gpu} number can only "
              f"be measured on a {args.gpu}. Run without --gpu to measure this GPU.")
        return 2
    try:
        arch = kmeans_kernels.arch_of(torch.device("cuda"))
    except ValueError as e:
        print(e)
        return 2
    todo = contenders(arch, kernels, not args.no_flashlib_autotune)
    print(f"{gpus.describe(spec)}; {len(shapes)} shapes x {len(todo)} kernels; seeds {SEEDS}, "
          f"10 warm-up + median of 30, the kernels taking turns call by call", flush=True)

    rows, first_rows = [], []
    header = "  ".join(f"{k}/{v}"[:18].rjust(18) for k, v, _ in todo)
    print(f"{'N':>8} {'D':>4} {'K':>6}  {header}   (ms, median; * = match rate < 1)", flush=True)
    for N, D, K in shapes:
        sets = input_sets(N, D, K)
        flops = 2.0 * N * D * K
        cells, measured = [], []
        timings = timing.bench_interleaved({(kernel, variant): fn for kernel, variant, fn in todo}, sets)
        for kernel, variant, fn in todo:
            t = timings[kernel, variant]
            rate = match_rate(fn, sets)
            measured.append(dict(kernel=kernel, variant=variant, N=N, D=D, K=K, ms_median=t.ms_median,
                                 ms_min=t.ms_min, ms_max=t.ms_max, tflops=t.tflops(flops), match_rate=rate))
            cells.append(f"{t.ms_median:.4f}{'*' if rate < 1 else ' '}".rjust(18))
        print(f"{N:>8} {D:>4} {K:>6}  {'  '.join(cells)}", flush=True)
        del sets
        if not args.no_record:                      # this shape's rows, now: a later failure keeps them
            records.append(spec.key, TABLE, measured)
        rows += measured
        if args.first_calls and "ours" in kernels:
            shape_first = first_call_rows(N, D, K, args.first_calls)
            if not args.no_record:
                records.append(spec.key, FIRST_CALL_TABLE, shape_first)
            first_rows += shape_first
        torch.cuda.empty_cache()

    print("\ngeometric mean over the shapes:")
    for kernel, variant, _ in todo:
        mine = [r for r in rows if (r["kernel"], r["variant"]) == (kernel, variant)]
        print(f"  {kernel + '/' + variant:<28} {timing.geomean(r['ms_median'] for r in mine):.4f} ms   "
              f"lowest match rate {min(r['match_rate'] for r in mine):.4f}")
    if first_rows:
        print("\nfirst call on fresh inputs vs repeated inputs (ms, median):")
        for kernel, variant in dict.fromkeys((r["kernel"], r["variant"]) for r in first_rows):
            mine = [r for r in first_rows if (r["kernel"], r["variant"]) == (kernel, variant)]
            fresh = timing.geomean(r["ms_median"] for r in mine if r["inputs"] == "fresh")
            again = timing.geomean(r["ms_median"] for r in mine if r["inputs"] == "repeated")
            print(f"  {kernel + '/' + variant:<28} fresh {fresh:.4f}   repeated {again:.4f}   (geomean over shapes)")
    if not args.no_record:
        print(f"appended {len(rows)} rows to {records.path(spec.key, TABLE)}"
              + (f" and {len(first_rows)} to {records.path(spec.key, FIRST_CALL_TABLE)}" if first_rows else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
