"""One device call for a kernel package: its GPU tests, then its benchmark, each killed at a hard time limit;
the logs and the recorded table land in $OUT (build/device_<package>/ elsewhere).

    PYTHONUNBUFFERED=1 python3 tools/device.py kmeans [--quick] [bench args...]
    PYTHONUNBUFFERED=1 python3 tools/device.py gemm [--quick] [bench args...]

--quick: k-means runs the D=128 correctness tests plus the adversarial ones (fewer compilations); the GEMM
benchmarks 4096^3 only and records nothing. Bench arguments pass through (e.g. `--no-flashlib-autotune`,
`--shapes 65536,128,4096`). Writes $OUT/pytest.txt, $OUT/bench.txt and the table the bench appended to
(data/measured/h200/<table>.csv), so that a hung kernel cannot eat the device budget and the rows come back.
On a lent GPU machine the tree arrives without .git: put the commit in the command, e.g.
`WORKBOOK_COMMIT=<git rev-parse --short HEAD> python3 tools/device.py gemm`, so recorded rows carry it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "data" / "measured" / "h200"
PACKAGES = {
    # tests, the -k expression of --quick, (tests limit, quick tests limit), bench module, bench limit, table
    "kmeans": ("tests/test_kmeans_hopper.py", "(exact and 128) or adversarial or misaligned or c_sq or fp16",
               (240, 150), "kmeans_kernels.bench", 420, "kmeans_assign"),
    "gemm": ("tests/test_gemm_hopper.py", None, (240, 240), "gemm_kernels.bench", 330, "gemm"),
}


def steps(package: str, quick: bool, bench_args: list[str], out: Path) -> list[tuple[list[str], str, int]]:
    """The (command, log file, time limit in s) of each step, in order."""
    if package not in PACKAGES:
        raise ValueError(f"package must be one of {sorted(PACKAGES)}, got {package!r}")
    tests, quick_k, (limit, quick_limit), bench, bench_limit, _ = PACKAGES[package]
    test = [sys.executable, "-m", "pytest", "-m", "gpu", tests, "-q", "-p", "no:cacheprovider"]
    if quick and quick_k:
        test += ["-k", quick_k]
    run = [sys.executable, "-m", bench, *bench_args]
    if package == "gemm":
        run[3:3] = ["--csv", str(out / "gemm_rows.csv")]
        if quick:
            run += ["--shapes", "4096x4096x4096", "--no-record"]
    return [(test, "pytest.txt", quick_limit if quick else limit), (run, "bench.txt", bench_limit)]


def tee(cmd: list[str], log: Path, timeout_s: int) -> int:
    """Run `cmd` in the repository root, echoing its output and saving it to `log`; kill it after `timeout_s`
    seconds (a hung kernel must not eat the device budget). Returns its exit status (-9 when killed)."""
    print("$", " ".join(cmd), flush=True)
    with open(log, "w") as f:
        proc = subprocess.Popen(["timeout", "-s", "KILL", str(timeout_s), *cmd], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            f.write(line)
            f.flush()
        return proc.wait()


def out_dir(name: str) -> Path:
    """$OUT on the device machine, build/<name> elsewhere; created."""
    out = Path(os.environ.get("OUT", ROOT / "build" / name))
    out.mkdir(parents=True, exist_ok=True)
    return out


def keep(out: Path, *files: Path) -> None:
    """Copy each of `files` that exists (a recorded table with this run's rows appended, say) into `out`, so
    that it comes back from the device machine."""
    for path in files:
        if path.exists():
            shutil.copy(path, out / path.name)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in PACKAGES:
        print(__doc__)
        return 2
    package, rest = argv[0], argv[1:]
    quick = "--quick" in rest
    bench_args = [a for a in rest if a != "--quick"]
    out = out_dir(f"device_{package}")
    status = [tee(cmd, out / log, limit) for cmd, log, limit in steps(package, quick, bench_args, out)]
    keep(out, MEASURED / f"{PACKAGES[package][-1]}.csv")
    print(f"tests exit {status[0]}, bench exit {status[1]}; files in {out}")
    return status[0] or status[1]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
