"""For the clock probes (`kmeans_ablation_clocks_probe.py`, `gemm_clocks_sustained_probe.py`): one function run back to
back for seconds while nvidia-smi samples the SM clock, the board power and the throttle reasons every 20 ms.
    row = sustained(fn, log_path, seconds=3.0, batch=10)   # us per call, clock, power, throttle reasons"""
import subprocess
import time

import pandas as pd
import torch

QUERY = "--query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active"


def sustained(fn, log, seconds: float, batch: int) -> dict:
    """`fn` called in batches of `batch` (a sync after each) for `seconds`, after 20 warm-up calls; the samples'
    first fifth is dropped as the clock's ramp. Returns us per call, the median and least SM clock (MHz), the
    median power (W), the sample count and the throttle reasons seen."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", QUERY, "--format=csv,noheader,nounits", "-lms", "20", "-f", str(log)])
    time.sleep(0.3)
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(batch):
            fn()
        calls += batch
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    smi.terminate()
    smi.wait()
    samples = pd.read_csv(log, header=None, names=["t", "sm_mhz", "power_w", "throttle"], skipinitialspace=True)
    samples = samples.iloc[len(samples) // 5:]
    return dict(us_per_call=1e6 * elapsed / calls, sm_mhz_median=samples.sm_mhz.median(),
                sm_mhz_min=samples.sm_mhz.min(), power_w_median=samples.power_w.median(), samples=len(samples),
                throttle=";".join(sorted(set(map(str, samples.throttle)))))
