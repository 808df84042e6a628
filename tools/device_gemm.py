"""One device call for the Hopper GEMM: the GPU tests, then the benchmark; results land in $OUT.

    PYTHONUNBUFFERED=1 python3 tools/device_gemm.py [--quick] [bench args...]

--quick benchmarks 4096^3 only (a smoke run). Writes $OUT/pytest.txt, $OUT/bench.txt, $OUT/gemm_rows.csv
and $OUT/gemm.csv (data/measured/h200/gemm.csv after the run's rows were appended).
"""
import sys

from devrun import keep, out_dir, tee

OUT = out_dir("device_gemm")


# How much of a timed call is the host? The seeds' method synchronises after every call, so host time
# between the start event and the launch is inside the measurement; back-to-back launches hide it.
OVERHEAD = """
import time, torch
from gemm_kernels import hopper
a = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16); b = torch.randn_like(a)
for name, fn in (('torch', torch.matmul), ('ours', hopper.gemm)):
    for _ in range(5): fn(a, b)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(50): fn(a, b)
    host = (time.perf_counter() - t) / 50 * 1e6
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(50): fn(a, b)
    e.record(); e.synchronize()
    print(f'{name}: host {host:.1f} us per call (async enqueue), back-to-back {s.elapsed_time(e) / 50 * 1e3:.1f} us per call')
"""


def main():
    args = sys.argv[1:]
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    rc_tests = tee([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                    "tests/test_gemm_hopper.py"], "pytest.txt", 240, OUT)
    tee([sys.executable, "-c", OVERHEAD], "overhead.txt", 120, OUT)
    bench = [sys.executable, "-m", "gemm_kernels.bench", "--csv", str(OUT / "gemm_rows.csv")]
    if quick:
        bench += ["--shapes", "4096x4096x4096", "--no-record"]
    rc_bench = tee(bench + args, "bench.txt", 330, OUT)
    keep("gemm", OUT)
    print(f"tests rc={rc_tests} bench rc={rc_bench}")
    sys.exit(rc_tests or rc_bench)


if __name__ == "__main__":
    main()
