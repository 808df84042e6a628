"""One device call for the Hopper k-means kernels: the GPU tests, then the benchmark; results land in $OUT.

    PYTHONUNBUFFERED=1 python3 tools/device_kmeans.py [--quick] [bench args...]

On a warm H200 machine of this workplace: `. /tmp/site/env.sh && PYTHONUNBUFFERED=1 python3 tools/device_kmeans.py`.
--quick runs the D=128 correctness tests plus the adversarial ones (fewer compilations) instead of all of them.
Bench arguments pass through (e.g. `--no-flashlib-autotune`, `--shapes 65536,128,4096`). Writes
$OUT/pytest.txt, $OUT/bench.txt and $OUT/kmeans_assign.csv (data/measured/h200/kmeans_assign.csv after the
run's rows were appended). Each step is killed at its time limit, so a hung kernel cannot eat the device budget.
"""
import sys

from devrun import keep, out_dir, tee

OUT = out_dir("device_kmeans")
QUICK = "(exact and 128) or adversarial or misaligned or c_sq or fp16"


def main(argv):
    quick = "--quick" in argv
    bench_args = [a for a in argv if a != "--quick"]
    test = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/test_kmeans_hopper.py", "-q", "-x",
            "-p", "no:cacheprovider", *(["-k", QUICK] if quick else [])]
    status = tee(test, "pytest.txt", 150 if quick else 240, OUT)
    bench_status = tee([sys.executable, "-m", "kmeans_kernels.bench", *bench_args], "bench.txt", 420, OUT)
    keep("kmeans_assign", OUT)
    print(f"tests exit {status}, bench exit {bench_status}; files in {OUT}")
    return status or bench_status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
