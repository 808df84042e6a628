"""Device calls for the k-means step kernels: their GPU tests, the step benchmark, the ncu evidence; into $OUT.

    PYTHONUNBUFFERED=1 python3 tools/device_kmeans_steps.py tests ncu     # ~3-4 min: pytest -m gpu, then ncu
    PYTHONUNBUFFERED=1 python3 tools/device_kmeans_steps.py bench         # ~2-3 min: the 13 seed shapes
    PYTHONUNBUFFERED=1 python3 tools/device_kmeans_steps.py bench --quick # ~1 min: 3 shapes at D = 128

Parts run in the order given, each under a hard time limit (a hung kernel cannot eat the device budget):
`tests` (tests/test_kmeans_steps.py and the GPU tests of tests/test_timing.py, on 4 pytest-xdist workers),
`ncu` (tools/ncu_kmeans_steps.py), `bench` (python -m kmeans_kernels.steps.bench; further arguments pass
through). Writes $OUT/<part>.txt and brings back data/measured/h200/kmeans_steps.csv and kmeans_steps_ncu.txt.
Put the commit in the command on a machine without .git: `WORKBOOK_COMMIT=<sha> python3 tools/...`.
"""
import sys

from device import MEASURED, keep, out_dir, tee   # tools/device.py: the one home of these helpers

OUT = out_dir("device_kmeans_steps")
PARTS = {
    "tests": ([sys.executable, "-m", "pytest", "-m", "gpu", "tests/test_kmeans_steps.py", "tests/test_timing.py",
               "-q", "-n", "4", "-p", "no:cacheprovider"], 300),
    "ncu": ([sys.executable, "tools/ncu_kmeans_steps.py"], 240),
    "bench": ([sys.executable, "-m", "kmeans_kernels.steps.bench"], 420),
}


def main(argv):
    parts = [a for a in argv if a in PARTS] or ["tests", "ncu"]
    extra = [a for a in argv if a not in PARTS]
    statuses = {}
    for part in parts:
        cmd, limit = PARTS[part]
        statuses[part] = tee(cmd + (extra if part == "bench" else []), OUT / f"{part}.txt", limit)
    keep(OUT, MEASURED / "kmeans_steps.csv", MEASURED / "kmeans_steps_ncu.txt")
    print(f"exit statuses {statuses}; files in {OUT}")
    return max(statuses.values(), default=0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
