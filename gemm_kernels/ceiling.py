"""What a tuned bf16 GEMM reaches on our H200: cuBLAS (through torch.matmul) at two cubes, for orientation.

    ceiling.CUBLAS_BF16_TFLOPS[4096]       697.0 (M = N = K = 4096)

The datasheet's 989 TFLOP/s (`workbook.gpus.H200.bf16_dense_tflops`) is a peak no kernel reaches; these are
the rates a tuned kernel does reach here, so that a figure can draw a realistic line beside the paper one
(and the k-means floor, `kmeans_kernels.floor`, takes its tensor-core rate from them). Measured once, not by
the benchmarks of this package: `SOURCE` says how.
"""
from __future__ import annotations

from types import MappingProxyType

CUBLAS_BF16_TFLOPS = MappingProxyType({4096: 697.0, 8192: 777.0})     # M = N = K -> TFLOP/s
SOURCE = ("measured on our H200 (driver 580.159.04, torch 2.11.0+cu130) on 2026-11-30 with workbook.timing.bench "
          "(3 rotating random input sets, 10 warm-up calls, median of 30): torch.matmul (cuBLAS) bf16 "
          "M=N=K=4096 and 8192. An earlier run on the same kind of machine gave 684 and 749 TFLOP/s: expect a "
          "few percent between runs. Orientation only, not datasheet numbers.")
