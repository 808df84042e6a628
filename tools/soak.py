"""Soak and faults on a GPU: many calls of assign and gemm on random shapes, each answer checked; memory flat.

    python tools/soak.py            # 10,000 calls (k-means and GEMM), the Lloyd-loop check; ~2-3 min on an H200
    python tools/soak.py --quick    # 1,000 calls, a shorter Lloyd loop; well under a minute after the compiles

What it does, in one process:
  1. warm-up: compiles the few kernels the soak uses (k-means `auto` at D = 64 and 128, bf16 and fp16; the GEMM
     with its default options but narrow widths limited to 128, so at most two builds), then runs the first
     calls of the soak until every bounded cache (launch caches, their graphs, the GEMM's per-shape plans) is
     full, and only then measures GPU memory: "start";
  2. the soak: calls on random shapes (tiny, tails of every tile, large), bf16 and fp16 for k-means (the Hopper
     GEMM takes bf16), fresh tensors for most calls (far more distinct argument sets than any cache holds),
     a pool of earlier argument sets reused for the rest (graph captures, replays, evictions), now and then
     on a side stream. Every output is poisoned first and checked: k-means against kmeans_kernels.reference,
     bit for bit (small-integer inputs make the products exact); GEMM against fp32 torch (TF32 off), exactly
     on small-integer inputs and within a relative Frobenius error of 1e-2 on random ones;
  3. memory again ("end", after gc and empty_cache, the pools emptied as at the start): the GPU memory in use
     (the driver's count, as nvidia-smi shows it) must be within 1 % of the start, and torch's allocated bytes
     (a few MiB of cached plans) must not have grown by more than 64 MiB;
  4. a Lloyd loop with a new centroid tensor at every iteration, run eagerly and captured whole into a user's
     CUDA graph (torch.cuda.graph) and replayed: identical assignments and centroids.
The summary goes to $OUT/soak.json when $OUT is set (the device machine), else build/soak/soak.json; a short
table is printed last. Exit status 0 when every check passed.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gemm_kernels  # noqa: E402
import kmeans_kernels  # noqa: E402
from kmeans_kernels import reference  # noqa: E402
from workbook import gpus, launch  # noqa: E402

KMEANS_D = (64, 128)                     # auto picks one variant for both (hopper.auto_variant): one build per D and dtype
KMEANS_DTYPES = (torch.bfloat16, torch.float16)
GEMM_NARROW = (128,)                     # the balanced plan's narrow widths: at most two GEMM builds
POOL = 96                                # argument sets kept for reuse, per package
POOL_BYTES = 2 << 30
REUSE = 0.3                              # fraction of calls on a pooled argument set
SIDE_STREAM = 0.05
GEMM_REL_TOL = 1e-2
POISON = -7
DEVICE = "cuda"                          # tests/test_soak.py runs the harness on the CPU with stand-in kernels


def small_integers(shape, gen, dtype):
    return torch.randint(-3, 4, shape, generator=gen, device=DEVICE).to(dtype)


class Soak:
    """Random calls of one package, each answer checked; a pool of argument sets to reuse."""

    def __init__(self, rng: random.Random, gen: torch.Generator, side: torch.cuda.Stream):
        self.rng, self.gen, self.side = rng, gen, side
        self.pool: list[dict] = []
        self.calls = self.mismatches = self.fresh = self.reused = 0
        self.failures: list[str] = []

    def _remember(self, case: dict) -> None:
        self.pool.append(case)
        while len(self.pool) > POOL or sum(c["bytes"] for c in self.pool) > POOL_BYTES:
            self.pool.pop(0)

    def step(self) -> None:
        reuse = self.pool and self.rng.random() < REUSE
        case = self.rng.choice(self.pool) if reuse else self.new_case()
        if reuse:
            self.reused += 1
        else:
            self.fresh += 1
            self._remember(case)
        if self.rng.random() < SIDE_STREAM:         # another stream: another argument set to the launch cache
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                got = self.run(case)
            torch.cuda.current_stream().wait_stream(self.side)
        else:
            got = self.run(case)
        self.calls += 1
        problem = self.check(case, got)
        if problem:
            self.mismatches += 1
            if len(self.failures) < 20:
                self.failures.append(problem)


class KmeansSoak(Soak):
    name = "kmeans assign"

    def new_case(self) -> dict:
        r = self.rng.random()
        if r < 0.45:                                   # tiny and tails of the 128-row / 128-centroid tiles
            N, K = self.rng.randint(1, 700), self.rng.randint(1, 400)
        elif r < 0.9:
            N, K = self.rng.randint(700, 40000), self.rng.randint(100, 2500)
        else:                                          # large
            N, K = self.rng.randint(100_000, 262_144), self.rng.randint(1024, 4096)
        D, dtype = self.rng.choice(KMEANS_D), self.rng.choice(KMEANS_DTYPES)
        x, c = small_integers((N, D), self.gen, dtype), small_integers((K, D), self.gen, dtype)
        c_sq = reference.centroid_norms(c) if self.rng.random() < 0.5 else None
        out = torch.empty(N, dtype=torch.int32, device=DEVICE)
        return dict(x=x, c=c, c_sq=c_sq, out=out, want=reference.assign(x, c, c_sq),
                    bytes=(N + K) * D * 2 + N * 8, shape=(N, D, K, str(dtype).split(".")[-1]))

    def run(self, case):
        case["out"].fill_(POISON)
        return kmeans_kernels.assign(case["x"], case["c"], c_sq=case["c_sq"], out=case["out"])

    def check(self, case, got):
        if got.data_ptr() != case["out"].data_ptr() or not torch.equal(got, case["want"]):
            bad = int((got != case["want"]).sum())
            return f"k-means {case['shape']}: {bad} of {got.numel()} rows differ from the reference"
        return None


class GemmSoak(Soak):
    name = "gemm"

    def new_case(self) -> dict:
        r = self.rng.random()
        if r < 0.45:
            M, N, K = self.rng.randint(1, 300), 8 * self.rng.randint(1, 64), 8 * self.rng.randint(1, 48)
        elif r < 0.92:
            M, N, K = self.rng.randint(300, 3000), 8 * self.rng.randint(32, 400), 8 * self.rng.randint(16, 300)
        else:
            M, N, K = self.rng.randint(3000, 4608), 8 * self.rng.randint(400, 576), 8 * self.rng.randint(256, 512)
        exact = self.rng.random() < 0.5
        if exact:
            a, b = small_integers((M, K), self.gen, torch.bfloat16), small_integers((K, N), self.gen, torch.bfloat16)
        else:
            a = torch.randn(M, K, generator=self.gen, device=DEVICE).to(torch.bfloat16)
            b = torch.randn(K, N, generator=self.gen, device=DEVICE).to(torch.bfloat16)
        want = a.float() @ b.float()
        out = torch.empty(M, N, dtype=torch.bfloat16, device=DEVICE)
        return dict(a=a, b=b, out=out, want=want, exact=exact, bytes=(M * K + K * N + 3 * M * N) * 2 + M * N * 4,
                    shape=(M, N, K))

    def run(self, case):
        case["out"].fill_(float("nan"))
        return gemm_kernels.gemm(case["a"], case["b"], out=case["out"], narrow_ns=GEMM_NARROW)

    def check(self, case, got):
        want = case["want"]
        if case["exact"]:
            if not torch.equal(got, want.to(torch.bfloat16)):
                return f"gemm {case['shape']} (small integers): not exact"
            return None
        err = ((got.float() - want).norm() / want.norm().clamp_min(1e-30)).item()
        if not err < GEMM_REL_TOL:                     # NaN (an unwritten element) fails too
            return f"gemm {case['shape']}: relative error {err:.3g}"
        return None


def memory() -> dict:
    torch.cuda.synchronize()
    gc.collect()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    return {"allocated": torch.cuda.memory_allocated(), "driver_used": total - free}


def launch_caches() -> list[launch.LaunchCache]:
    return [o for o in gc.get_objects() if isinstance(o, launch.LaunchCache)]


def lloyd(x: torch.Tensor, c: torch.Tensor, iterations: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Lloyd iterations with a new centroid tensor each time; capture-safe (no host sync) and deterministic on
    small-integer inputs (the sums are exact in fp32, so their order does not matter)."""
    K, D = c.shape
    ones = torch.ones(x.shape[0], device=x.device)
    for _ in range(iterations):
        ids = kmeans_kernels.assign(x, c)
        sums = torch.zeros(K, D, device=x.device).index_add_(0, ids.long(), x.float())
        counts = torch.zeros(K, device=x.device).index_add_(0, ids.long(), ones)
        c = torch.where(counts[:, None] > 0, sums / counts.clamp_min(1)[:, None], c.float()).round().to(x.dtype)
    return kmeans_kernels.assign(x, c), c


def lloyd_check(iterations: int, seed: int) -> dict:
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    x = small_integers((65536, 128), gen, torch.bfloat16)
    c0 = x[torch.randperm(65536, generator=gen, device=DEVICE)[:512]].clone()
    eager_ids, eager_c = lloyd(x, c0, iterations)
    # warm-up on a side stream, then capture the whole loop (torch.cuda.graph's documented way)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        lloyd(x, c0, 1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_ids, graph_c = lloyd(x, c0, iterations)
    graph.replay()
    torch.cuda.synchronize()
    same = bool(torch.equal(graph_ids, eager_ids) and torch.equal(graph_c, eager_c))
    again = lloyd(x, c0, iterations)          # the process is still usable after the capture, and agrees
    torch.cuda.synchronize()
    same_after = bool(torch.equal(again[0], eager_ids) and torch.equal(again[1], eager_c))
    return {"iterations": iterations, "identical": same and same_after,
            "clusters_used": int(torch.unique(eager_ids).numel())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/soak.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 calls and a 5-iteration Lloyd loop")
    ap.add_argument("--calls", type=int, default=None, help="total calls (default 10,000; --quick 1,000)")
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args(argv)
    spec = gpus.current()
    if spec is None:
        print("no CUDA GPU here: the soak runs kernels live (python tools/soak.py on an H100/H200 or B200)")
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    total = args.calls or (1_000 if args.quick else 10_000)
    rng = random.Random(args.seed)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    side = torch.cuda.Stream()
    soaks = [KmeansSoak(rng, gen, side)]
    if spec.arch == "sm_90a":
        soaks.append(GemmSoak(rng, gen, side))
    else:
        print(f"{spec.name}: GEMM soak skipped (the Blackwell GEMM compiles once per shape)")
    weights = [0.55, 0.45][:len(soaks)]
    t0 = time.time()
    print(f"{gpus.describe(spec)}; {total} calls, seed {args.seed}", flush=True)

    # 1. warm-up: compiles, then calls until the bounded caches are full; the start of the memory check
    for dtype in KMEANS_DTYPES:
        for D in KMEANS_D:
            x = small_integers((300, D), gen, dtype)
            kmeans_kernels.assign(x, x[:200].clone())
    warmup = max(400, total // 10)
    for _ in range(warmup):
        rng.choices(soaks, weights)[0].step()
    for s in soaks:      # the pools hold tensors: memory is compared with them empty, the caches full
        s.pool.clear()
    start = memory()
    t_warm = time.time() - t0
    print(f"warm-up: {warmup} calls in {t_warm:.0f} s (compiles included); memory at start "
          f"{start['allocated'] / 2**20:.1f} MiB allocated, {start['driver_used'] / 2**20:.0f} MiB used", flush=True)

    # 2. the soak
    t1 = time.time()
    for s in soaks:
        s.calls = s.mismatches = s.fresh = s.reused = 0
        s.failures.clear()
    for i in range(total):
        rng.choices(soaks, weights)[0].step()
        if (i + 1) % 2000 == 0:
            print(f"  {i + 1} calls, {time.time() - t1:.0f} s, mismatches "
                  f"{sum(s.mismatches for s in soaks)}", flush=True)
    soak_s = time.time() - t1
    for s in soaks:      # the pools hold tensors: let them go before the memory check
        s.pool.clear()

    # 3. memory, after the caches have been churned through
    end = memory()
    caches = launch_caches()

    # 4. the Lloyd loop, eager and inside a user's CUDA graph
    lloyd_result = lloyd_check(5 if args.quick else 20, args.seed)

    summary = summarize(spec.name, args.seed, soaks, start, end, caches, lloyd_result,
                        {"warmup": t_warm, "soak": soak_s, "total": time.time() - t0})
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "build" / "soak"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "soak.json").write_text(json.dumps(summary, indent=2, default=str))
    print_table(summary, out_dir / "soak.json")
    return 0 if summary["ok"] else 1


def summarize(gpu: str, seed: int, soaks, start: dict, end: dict, caches, lloyd_result: dict, seconds: dict) -> dict:
    growth = {k: (end[k] - start[k]) / max(start[k], 1) for k in start}
    summary = {
        "gpu": gpu, "seed": seed, "calls": {s.name: s.calls for s in soaks},
        "fresh_argument_sets": {s.name: s.fresh for s in soaks}, "reused": {s.name: s.reused for s in soaks},
        "mismatches": {s.name: s.mismatches for s in soaks}, "failures": [f for s in soaks for f in s.failures],
        "memory_start": start, "memory_end": end, "memory_growth": growth,
        "launch_caches": [{"entries": len(c), "graphs": c.graph_count, "size": c.size, "max_graphs": c.max_graphs}
                          for c in caches],
        "lloyd": lloyd_result, "seconds": seconds,
    }
    # GPU memory is the driver's view (what nvidia-smi shows): within 1 %. torch's allocated bytes are a small
    # number (the caches' work lists, a few MiB), so their change is bounded absolutely.
    summary["ok"] = (not any(summary["mismatches"].values()) and abs(growth["driver_used"]) <= 0.01
                     and end["allocated"] - start["allocated"] <= 64 << 20 and lloyd_result["identical"]
                     and all(c["graphs"] <= c["max_graphs"] and c["entries"] <= c["size"]
                             for c in summary["launch_caches"]))
    return summary


def print_table(summary: dict, where) -> None:
    for f in summary["failures"]:
        print("FAIL", f)
    rows = []
    for name, calls in summary["calls"].items():
        rows.append((f"{name} calls (fresh / reused)",
                     f"{calls} ({summary['fresh_argument_sets'][name]} / {summary['reused'][name]})"))
        rows.append((f"{name} mismatches", str(summary["mismatches"][name])))
    caches = summary["launch_caches"]
    rows.append(("launch caches: most entries / graphs",
                 f"{max((c['entries'] for c in caches), default=0)} / {max((c['graphs'] for c in caches), default=0)}"))
    start, end, growth = summary["memory_start"], summary["memory_end"], summary["memory_growth"]
    for k, label in (("driver_used", "GPU memory used (driver)"), ("allocated", "torch allocated")):
        rows.append((f"{label}, start -> end",
                     f"{start[k] / 2**20:.1f} -> {end[k] / 2**20:.1f} MiB ({100 * growth[k]:+.2f} %)"))
    lloyd = summary["lloyd"]
    rows.append((f"Lloyd loop, eager vs user graph ({lloyd['iterations']} it.)",
                 "identical" if lloyd["identical"] else "DIFFERENT"))
    sec = summary["seconds"]
    rows.append(("time (warm-up + soak)", f"{sec['warmup']:.0f} s + {sec['soak']:.0f} s"))
    rows.append(("verdict", f"{'PASS' if summary['ok'] else 'FAIL'}  ({where})"))
    print()
    for label, value in rows:
        print(f"{label:<46} {value}")


if __name__ == "__main__":
    sys.exit(main())
