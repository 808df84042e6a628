"""The fastest k-means assignment could run on the H200: the largest of three times no kernel can beat.

    floor.floor(65536, 128, 4096)     # Floor(ms=0.087, bound='tensor cores', tensor_ms=..., epilogue_ms=..., dram_ms=...)

* tensor-core time: the 2 N D K flops of the dot products at about 790 TFLOP/s, the dense bf16 rate a tuned GEMM
  reaches on the H200 (cuBLAS measured 697-777 TFLOP/s at 4096^3-8192^3, gemm_kernels.ceiling; the
  datasheet's 989 is not reached by any kernel);
* CUDA-core epilogue time: about 4 operations per score (the subtraction, the compare, two selects) on 132 SMs x
  128 FP32 lanes at 1.98 GHz;
* DRAM time: x, c and the ids, each moved once, at 4.3 TB/s (a device-to-device copy measured 4.1-4.3).

A floor, not a forecast: the three overlap perfectly in it, nothing waits for anything.
"""
from __future__ import annotations

from dataclasses import dataclass

TENSOR_TFLOPS = 790.0
EPILOGUE_OPS_PER_SCORE = 4
SMS, LANES_PER_SM, CLOCK_GHZ = 132, 128, 1.98
DRAM_TBPS = 4.3
ELEMENT_BYTES, ID_BYTES = 2, 4
BOUNDS = ("tensor cores", "CUDA-core epilogue", "DRAM")


@dataclass(frozen=True)
class Floor:
    ms: float
    bound: str
    tensor_ms: float
    epilogue_ms: float
    dram_ms: float

    def __str__(self) -> str:
        return (f"{self.ms * 1e3:.3g} us, {self.bound} (tensor {self.tensor_ms * 1e3:.3g} us, epilogue "
                f"{self.epilogue_ms * 1e3:.3g} us, DRAM {self.dram_ms * 1e3:.3g} us)")


def floor(N: int, D: int, K: int) -> Floor:
    """The floor of one assignment of N points of dimension D to K centroids, in ms."""
    for name, v in (("N", N), ("D", D), ("K", K)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    tensor = 2.0 * N * D * K / (TENSOR_TFLOPS * 1e12)
    epilogue = EPILOGUE_OPS_PER_SCORE * N * K / (SMS * LANES_PER_SM * CLOCK_GHZ * 1e9)
    dram = (ELEMENT_BYTES * (N + K) * D + ID_BYTES * N) / (DRAM_TBPS * 1e12)
    times = (tensor, epilogue, dram)
    worst = max(range(3), key=times.__getitem__)
    return Floor(ms=times[worst] * 1e3, bound=BOUNDS[worst], tensor_ms=tensor * 1e3, epilogue_ms=epilogue * 1e3,
                 dram_ms=dram * 1e3)
