"""Is the machine code still the same? Compile every variant of both kernel packages with no GPU and hash it.

    python tools/sass_identity.py --out build/sass_identity/new.json          # about 6 minutes on 2 cores
    python tools/sass_identity.py --compare build/sass_identity/base.json     # compile now, then diff
    python tools/sass_identity.py --compare BASE.json NEW.json                # diff two manifests
    python tools/sass_identity.py --only gemm-hopper --list                   # the ids, nothing compiled

A manifest maps each variant id (e.g. ``gemm-hopper/stream-k-deferred``) to the sha256 of its SASS text (as
``workbook.sass.disassemble`` prints it) and of its PTX, or to the error its compile raised. The ids cover
every code path the kernels have: the k-means variants of both architectures at several D and both input
dtypes; the Hopper GEMM's dtypes, epilogues, tile rows and widths, ring depths, clusters, schedules, narrow
widths, the deferred epilogue, stream-K and the traced build; the Blackwell GEMM's epilogues, depths, schedules (one MMA
loop per item width) and dtypes. A refactoring that keeps behaviour keeps every hash: the kernels' names
carry their module and class (CuTe DSL mangles them in), so moving a kernel class shows up here too.

`--compare` prints one line per id that differs and a summary, and exits 1 if any SASS differs.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KMEANS_D = (16, 64, 128, 256, 320, 512)


def _kmeans_variants():
    """Every variant of `kmeans_kernels.variants` (a D a variant refuses records its error)."""
    sys.path.insert(0, str(ROOT))
    from kmeans_kernels.variants import names
    out = {}
    for arch, family in (("sm_90a", "kmeans-hopper"), ("sm_100a", "kmeans-blackwell")):
        for variant in names(arch):
            for D in KMEANS_D:
                if variant == "x_resident" and D > 256:
                    continue
                out[f"{family}/{variant}/D{D}"] = ("kmeans", dict(arch=arch, variant=variant, D=D, dtype="bf16"))
            out[f"{family}/{variant}/D128-fp16"] = ("kmeans", dict(arch=arch, variant=variant, D=128, dtype="fp16"))
    return out


# The Hopper GEMM: (M, N, K) and gemm keyword options. M and N matter only through the balanced plan's narrow
# width (the kernel is shape-generic), so each narrow width is reached by a shape whose plan picks it.
REGISTER = dict(tile=(128, 256, 64), stages=4, epilogue="register", schedule="uniform", cluster_m=1,
                defer_epilogue=False)
STAGED = dict(tile=(128, 256, 64), stages=4, epilogue="staged", schedule="uniform", cluster_m=1)
CLUSTER = dict(REGISTER, cluster_m=2)
SWAPPED = dict(swap_ab=True, tile=(128, 288, 64), epilogue="staged", schedule="uniform", cluster_m=4)
S4 = 4096
S8 = 8192
HOPPER_GEMM = {
    "default": (S4, S4, S4, {}),                                 # deferred register, balanced (240), pairs
    "default-8192": (S8, S8, S8, {}),
    "default-narrow192": (2048, 5120, 1024, {}),
    "register": (S4, S4, S4, REGISTER),
    "register-static": (S4, S4, S4, dict(REGISTER, dynamic=False)),
    "register-balanced": (S4, S4, S4, dict(REGISTER, schedule="balanced")),
    "staged": (S4, S4, S4, STAGED),
    "staged-static": (S4, S4, S4, dict(STAGED, dynamic=False)),
    "staged-balanced192": (S8, S8, S8, dict(STAGED, schedule="balanced")),
    "staged-balanced192-cluster2": (S8, S8, S8, dict(STAGED, schedule="balanced", cluster_m=2)),
    "staged-narrow128": (S8, S8, S8, dict(STAGED, schedule="balanced", narrow_ns=(128,))),
    "staged-narrow128-1024x4608": (1024, 4608, 1024, dict(STAGED, schedule="balanced", narrow_ns=(128,))),
    "staged-cluster2": (S4, S4, S4, dict(STAGED, cluster_m=2)),
    "seven-128": (S4, S4, S4, dict(REGISTER, tile=(128, 128, 64), stages=7)),
    "seven-128-balanced112": (S4, S4, S4, dict(REGISTER, tile=(128, 128, 64), stages=7, schedule="balanced")),
    "tile128-narrow96": (S8, S8, S8, dict(tile=(128, 128, 64), narrow_ns=(96,))),
    "tile128-narrow64": (S8, S8, S8, dict(tile=(128, 128, 64), narrow_ns=(64,))),
    "tile128-staged-balanced64": (S8, S8, S8, dict(STAGED, tile=(128, 128, 64), stages=6, schedule="balanced")),
    "tile192": (S4, S4, S4, dict(REGISTER, tile=(128, 192, 64))),
    "tile192-balanced": (S8, S8, S8, dict(tile=(128, 192, 64))),
    "tile192-balanced96": (1024, 3584, 1024, dict(tile=(128, 192, 64))),
    "tile64": (S4, S4, S4, dict(REGISTER, tile=(128, 64, 64))),
    "tile64-balanced32": (1024, 1536, 1024, dict(tile=(128, 64, 64))),
    "stages2": (S4, S4, S4, dict(CLUSTER, stages=2)),
    "stages3": (S4, S4, S4, dict(CLUSTER, stages=3)),
    "cluster": (S4, S4, S4, CLUSTER),
    "cluster-static": (S4, S4, S4, dict(CLUSTER, dynamic=False)),
    "cluster-balanced": (S8, S8, S8, dict(CLUSTER, schedule="balanced")),
    "deferred": (S4, S4, S4, dict(REGISTER, defer_epilogue=True)),
    "deferred-balanced-cluster": (S8, S8, S8, dict(CLUSTER, schedule="balanced", defer_epilogue=True)),
    "deferred-static": (S4, S4, S4, dict(dynamic=False)),
    "narrow240": (8152, 8184, 264, dict(narrow_ns=(240,))),
    "narrow224": (8152, 8184, 264, dict(narrow_ns=(224,))),
    "narrow192": (8152, 8184, 264, dict(narrow_ns=(192,))),
    "narrow224-plain-c1": (8152, 8184, 264, dict(narrow_ns=(224,), defer_epilogue=False, cluster_m=1)),
    "narrow128": (8192, 8192, 264, dict(narrow_ns=(128,))),
    "stream-k": (S4, S4, S4, dict(CLUSTER, stream_k=True)),
    "stream-k-deferred": (S4, S4, S4, dict(CLUSTER, stream_k=True, defer_epilogue=True)),
    "stream-k-c1-staged": (S4, S4, S4, dict(STAGED, stream_k=True)),
    "stream-k-c1-register": (S4, S4, S4, dict(REGISTER, stream_k=True)),
    "stream-k-static": (S4, S4, S4, dict(CLUSTER, stream_k=True, dynamic=False)),
    "trace": (S4, S4, S4, dict(CLUSTER, trace=True)),
    "trace-balanced-narrow": (S8, S8, S8, dict(CLUSTER, schedule="balanced", trace=True)),
    "trace-default": (S4, S4, S4, dict(trace=True)),
    "trace-staged": (S4, S4, S4, dict(STAGED, trace=True)),
    "trace-stream-k": (S4, S4, S4, dict(CLUSTER, stream_k=True, defer_epilogue=True, trace=True)),
    "fp16-default": (S4, S4, S4, dict(dtype="fp16")),
    "fp16-staged": (S4, S4, S4, dict(STAGED, dtype="fp16")),
    "rows64-128": (S4, S4, S4, dict(tile=(64, 128, 64))),
    "rows64-64-stream-k": (16, 8192, 4096, dict(tile=(64, 64, 64), schedule="uniform", stream_k=True, cluster_m=1)),
    "rows64-256-cluster2": (S4, S4, S4, dict(tile=(64, 256, 64), schedule="uniform", cluster_m=2)),
    "n64-cluster2n": (1024, 1024, 8192, dict(tile=(128, 64, 64), schedule="uniform", cluster_m=1, cluster_n=2)),
    "n64-cluster2n-stream-k": (1024, 1024, 8192, dict(tile=(128, 64, 64), schedule="uniform", cluster_m=1,
                                                      cluster_n=2, stream_k=True)),
    "swapped-288-cluster4": (800, S4, 3000, SWAPPED),
    "swapped-96-cluster4-stream-k": (96, 12288, 8192, dict(SWAPPED, tile=(128, 96, 64), stream_k=True)),
    "swapped-160-cluster1-fp16": (800, S4, 3000, dict(SWAPPED, tile=(128, 160, 64), cluster_m=1, dtype="fp16")),
    "swapped-128-cluster2-trace": (800, S4, 3000, dict(SWAPPED, tile=(128, 128, 64), cluster_m=2, trace=True)),
}

# The Blackwell GEMM compiles with static shapes (the K loop's trip count is known): (M, N, K) matter.
BLACKWELL_GEMM = {}
for _ep, _depths in (("register", range(2, 8)), ("staged", range(2, 6))):
    for _s in _depths:
        BLACKWELL_GEMM[f"{_ep}-s{_s}"] = (S4, S4, S4, dict(stages=_s, epilogue=_ep, schedule="uniform"))
    for _label, (_M, _N, _K) in (("4096-w256-192", (S4, S4, S4)), ("8192-w256-224", (S8, S8, S8)),
                                 ("tail-w256", (1000, 1032, 520)), ("5120-w256-192", (5120, 5120, 1032))):
        BLACKWELL_GEMM[f"{_ep}-balanced-{_label}"] = (_M, _N, _K, dict(epilogue=_ep, schedule="balanced"))
    BLACKWELL_GEMM[f"{_ep}-uniform-tail"] = (1000, 1032, 520, dict(epilogue=_ep, schedule="uniform"))
    BLACKWELL_GEMM[f"{_ep}-fp16-balanced"] = (S4, S4, S4, dict(epilogue=_ep, schedule="balanced", dtype="fp16"))


def variants() -> dict[str, tuple[str, dict]]:
    """Every variant id -> (kind, arguments), in a fixed order."""
    out = _kmeans_variants()
    out.update({f"gemm-hopper/{k}": ("gemm-hopper", dict(shape=v[:3], kw=v[3])) for k, v in HOPPER_GEMM.items()})
    out.update({f"gemm-blackwell/{k}": ("gemm-blackwell", dict(shape=v[:3], kw=v[3]))
                for k, v in BLACKWELL_GEMM.items()})
    return out


def _dtype(name: str):
    import torch
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _compile(kind: str, args: dict):
    """workbook.sass.Artifacts of one variant, through each package's public compile entry."""
    if kind == "kmeans":
        from kmeans_kernels import blackwell, hopper
        backend = hopper if args["arch"] == "sm_90a" else blackwell
        return backend.compile(args["variant"], 1000, args["D"], 1000, dtype=_dtype(args["dtype"]))
    M, N, K = args["shape"]
    kw = dict(args["kw"])
    import gemm_kernels
    if "dtype" in kw:
        kw["dtype"] = _dtype(kw["dtype"])
    if kind == "gemm-hopper":
        entry = gemm_kernels.backend("sm_90a").compile_gemm
        if "trace" in kw and "variant" in inspect.signature(entry).parameters:
            kw["variant"] = {"trace": kw.pop("trace")}     # a tree from before the options object
        return entry(M, N, K, **kw)
    return gemm_kernels.backend("sm_100a").compile_gemm(M, N, K, **kw)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def compile_one(item: tuple[str, str, dict], dump: str | None = None) -> tuple[str, dict]:
    vid, kind, args = item
    t0 = time.perf_counter()
    try:
        art = _compile(kind, args)
    except Exception as err:        # a refused variant is a behaviour too: its message is recorded
        return vid, {"error": f"{type(err).__name__}: {err}"}
    if dump:
        path = Path(dump) / (vid.replace("/", "__") + ".sass")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(art.sass)
    return vid, {"sass": _sha(art.sass), "ptx": _sha(art.ptx), "sass_lines": art.sass.count("\n"),
                 "seconds": round(time.perf_counter() - t0, 1)}


def build(ids: dict, jobs: int, dump: str | None) -> dict:
    items = [(vid, kind, args) for vid, (kind, args) in ids.items()]
    results = {}
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        for n, (vid, rec) in enumerate(pool.map(compile_one, items, [dump] * len(items)), 1):
            results[vid] = rec
            status = rec.get("error", rec.get("sass", "")[:12])
            print(f"[{n}/{len(items)}] {vid}: {status}", flush=True)
    return {vid: results[vid] for vid in ids}


def _meta() -> dict:
    def git(*cmd):
        try:
            return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        except OSError:
            return ""
    import importlib.metadata
    return {"commit": git("rev-parse", "--short", "HEAD"), "dirty": bool(git("status", "--porcelain")),
            "cutlass_dsl": importlib.metadata.version("nvidia-cutlass-dsl"), "date": time.strftime("%Y-%m-%d %H:%M")}


def compare(base: dict, new: dict) -> int:
    """Print the ids whose SASS (or PTX, or error) differ; return how many SASS differ or are missing."""
    b, n = base["variants"], new["variants"]
    sass_diff, ptx_diff, missing = [], [], []
    for vid in sorted(set(b) | set(n)):
        if vid not in b or vid not in n:
            missing.append(vid)
            print(f"  only in {'new' if vid in n else 'base'}: {vid}")
            continue
        x, y = b[vid], n[vid]
        if x.get("error") or y.get("error"):
            if x.get("error") != y.get("error"):
                sass_diff.append(vid)
                print(f"  DIFFERS {vid}: {x.get('error') or 'compiled'} -> {y.get('error') or 'compiled'}")
            continue
        if x["sass"] != y["sass"]:
            sass_diff.append(vid)
            print(f"  SASS DIFFERS {vid}: {x['sass'][:12]} ({x['sass_lines']} lines) -> "
                  f"{y['sass'][:12]} ({y['sass_lines']} lines)")
        if x["ptx"] != y["ptx"]:
            ptx_diff.append(vid)
            print(f"  PTX differs {vid}")
    common = len(set(b) & set(n))
    errors = sum(1 for vid in set(b) & set(n) if b[vid].get("error") and vid not in sass_diff)
    print(f"base {base['meta'].get('commit')} vs new {new['meta'].get('commit')}"
          f"{' (uncommitted changes)' if new['meta'].get('dirty') else ''}: {common} variants in both "
          f"({errors} refused alike), SASS identical for {common - len(sass_diff)}, PTX identical for "
          f"{common - len(set(ptx_diff) | set(sass_diff))}; {len(missing)} in one manifest only")
    return len(sass_diff) + len(missing)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="write the manifest here (default: build/sass_identity/<commit>.json)")
    p.add_argument("--compare", nargs="+", metavar="MANIFEST",
                   help="BASE [NEW]: diff NEW (or a fresh build) against BASE")
    p.add_argument("--only", nargs="+", metavar="PREFIX", help="only the ids starting with one of these")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--dump", help="also write each variant's SASS into this folder")
    p.add_argument("--list", action="store_true", help="print the ids and exit")
    args = p.parse_args(argv)
    ids = {k: v for k, v in variants().items() if not args.only or k.startswith(tuple(args.only))}
    if args.list:
        print("\n".join(ids))
        return 0
    if args.compare and len(args.compare) > 2:
        p.error("--compare takes BASE and optionally NEW")
    if args.compare and len(args.compare) == 2:
        return 1 if compare(*(json.loads(Path(f).read_text()) for f in args.compare)) else 0
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    t0 = time.perf_counter()
    manifest = {"meta": _meta(), "variants": build(ids, args.jobs, args.dump)}
    manifest["meta"]["minutes"] = round((time.perf_counter() - t0) / 60, 1)
    out = Path(args.out or ROOT / "build" / "sass_identity" / f"{manifest['meta']['commit'] or 'tree'}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    print(f"{len(ids)} variants in {manifest['meta']['minutes']} min -> {out}")
    if args.compare:
        base = json.loads(Path(args.compare[0]).read_text())
        if args.only:
            base["variants"] = {k: v for k, v in base["variants"].items() if k.startswith(tuple(args.only))}
        return 1 if compare(base, manifest) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
