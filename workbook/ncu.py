"""Read the metric tables Nsight Compute prints (`ncu --metrics ...`, text output) into a DataFrame.

    ncu.read("data/measured/h200/probes/ncu_dyn_16384.txt")
    -> one row per profiled kernel: contender, kernel, and one column per metric in the metric's own unit
       (dram__bytes_read.sum in the unit ncu chose is normalised to GB, durations to ms, clocks to GHz)

The profiling scripts (`tools/ncu_*_steps.py`, and the one that wrote data/measured/h200/probes/ncu_*.txt)
print `profiled: <what>` to stderr before each kernel they profile, in the order ncu then reports them; `read`
pairs the two lists. A file whose counts differ is refused, so a number is never attached to the wrong
contender.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

_SCALE = {"byte": 1e-9, "Kbyte": 1e-6, "Mbyte": 1e-3, "Gbyte": 1.0, "Tbyte": 1e3,      # -> GB
          "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3,                                   # -> ms
          "hz": 1e-9, "Khz": 1e-6, "Mhz": 1e-3, "Ghz": 1.0}                              # -> GHz
_KERNEL = re.compile(r"^  (\S+) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)")
_METRIC = re.compile(r"^\s+([a-z_]+__[\w.]+)\s+(\S+)\s+([\d.,]+)\s*$")


def read(path) -> pd.DataFrame:
    """One row per profiled kernel (see the module docstring)."""
    contenders, kernels = [], []
    for line in Path(path).read_text().splitlines():
        if line.startswith("profiled: "):
            contenders.append(line[len("profiled: "):].strip())
        elif (k := _KERNEL.match(line)):
            kernels.append({"kernel": k.group(1)})
        elif (m := _METRIC.match(line)) and kernels:
            name, unit, value = m.groups()
            kernels[-1][name] = float(value.replace(",", "")) * _SCALE.get(unit, 1.0)
    if len(contenders) != len(kernels):
        raise ValueError(f"{path}: {len(contenders)} 'profiled:' lines but {len(kernels)} kernels in ncu's report")
    return pd.DataFrame([{"contender": c, **k} for c, k in zip(contenders, kernels)])
