"""Reading what the GEMM builds compiled to: the tcgen05 instruction descriptors of a Blackwell build's PTX.

    shapes = {mma_shape(idesc) for idesc in mma_descriptors(art.ptx)}   # {(256, 256), (256, 192)}

The Blackwell kernel compiles one MMA loop per item width of its plan; the instruction shape is fixed by a
32-bit descriptor that the DSL sets with a constant, so the PTX says which widths a build really issues.
(`kmeans_kernels.sass_checks` reads the k-means builds the same way.)
"""
import re
from collections import Counter


def mma_descriptors(ptx: str) -> Counter:
    """How many ``tcgen05.mma`` instructions of a build's PTX carry each instruction descriptor (the 32-bit value
    that fixes the MMA's shape and types). The DSL sets each descriptor register with a ``mov.b32`` of a constant;
    ptxas turns that into a ``UMOV`` of the same value in the SASS."""
    constants = dict(re.findall(r"mov\.b32\s+(%r\d+),\s*(\d+);", ptx))
    found = Counter()
    for idesc in re.findall(r"tcgen05\.mma\.cta_group::\d\.kind::f16\S*\s+\[[^\]]+\],\s*\S+,\s*\S+,\s*(%r\d+)", ptx):
        if idesc not in constants:
            raise ValueError(f"the instruction descriptor {idesc} of a tcgen05.mma is not a constant in this PTX")
        found[int(constants[idesc])] += 1
    return found


def mma_shape(idesc: int) -> tuple[int, int]:
    """(M, N) of a .kind::f16 tcgen05 instruction descriptor (PTX ISA: bits 17-22 hold N >> 3, bits 24-28 M >> 4)."""
    return ((idesc >> 24) & 0x1F) << 4, ((idesc >> 17) & 0x3F) << 3
