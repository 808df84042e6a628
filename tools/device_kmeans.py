"""One device call for the Hopper k-means kernels: the GPU tests, then the benchmark; results land in $OUT.

    PYTHONUNBUFFERED=1 python3 tools/device_kmeans.py [--quick] [bench args...]

On a warm H200 machine of this workplace: `. /tmp/site/env.sh && PYTHONUNBUFFERED=1 python3 tools/device_kmeans.py`.
--quick runs the D=128 correctness tests plus the adversarial ones (fewer compilations) instead of all of them.
Bench arguments pass through (e.g. `--no-flashlib-autotune`, `--shapes 65536,128,4096`). Writes
$OUT/pytest.txt, $OUT/bench.txt and $OUT/kmeans_assign.csv (data/measured/h200/kmeans_assign.csv after the
run's rows were appended). Each step is killed at its time limit, so a hung kernel cannot eat the device budget.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(os.environ.get("OUT", ROOT / "build" / "device_kmeans"))
QUICK = "(exact and 128) or adversarial or misaligned or c_sq or fp16"


def tee(cmd, log, timeout_s):
    """Run `cmd` under `timeout -s KILL`, echoing its output and saving it to $OUT/<log>; return its status."""
    print("$", " ".join(cmd), flush=True)
    with open(OUT / log, "w") as f:
        proc = subprocess.Popen(["timeout", "-s", "KILL", str(timeout_s), *cmd], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            f.write(line)
            f.flush()
        return proc.wait()


def main(argv):
    OUT.mkdir(parents=True, exist_ok=True)
    quick = "--quick" in argv
    bench_args = [a for a in argv if a != "--quick"]
    test = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/test_kmeans_hopper.py", "-q", "-x",
            "-p", "no:cacheprovider", *(["-k", QUICK] if quick else [])]
    status = tee(test, "pytest.txt", 150 if quick else 240)
    bench_status = tee([sys.executable, "-m", "kmeans_kernels.bench", *bench_args], "bench.txt", 420)
    csv = ROOT / "data" / "measured" / "h200" / "kmeans_assign.csv"
    if csv.exists():
        shutil.copy(csv, OUT / "kmeans_assign.csv")
    print(f"tests exit {status}, bench exit {bench_status}; files in {OUT}")
    return status or bench_status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
