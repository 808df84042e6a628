"""Launching a compiled CuTe DSL function with little host time: marshal each argument set once.

    launches = LaunchCache(compiled)                 # one per compiled function
    launches(key, lambda: (ptr_a, ptr_b, Int32(M), stream))   # key: every value the arguments encode

Why it matters. The seeds' timing method synchronises after every call, so everything the host does between
the start event and the launch is inside the measured latency. On the H200 machine (probe of 2026-11-30,
`notes/perf-log.md`) a call of the compiled function cost 26-29 us of host time, 11-12 us of which is the
compiled host code itself (TMA descriptor encodes and `cuLaunchKernelEx`); the rest is Python turning
pointers and Int32s into ctypes (`generate_execution_args`). Our own wrappers added another 50-60 us
(`make_ptr`, `cutlass.Int32`, `torch.cuda.current_stream`), so a 40 us kernel was timed at 80-90 us and the
4096^3 GEMM lost 20 % to cuBLAS in the synchronised timing while matching it back to back.

The cache keeps the marshalled (ctypes) arguments of the last `size` argument sets, keyed by the values
they encode (addresses, sizes, stream). A hit skips all argument building and goes straight to the compiled
host code. A key must hold every value that the arguments carry: equal keys must mean equal arguments.
"""
from __future__ import annotations

from typing import Callable, Hashable, Sequence

import torch


class LaunchCache:
    """Calls of one compiled CuTe DSL function, each argument set marshalled once (FIFO of `size` sets)."""

    def __init__(self, compiled, size: int = 64):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.compiled = compiled
        self.size = size
        self._entries: dict[Hashable, tuple] = {}

    def __call__(self, key: Hashable, make_args: Callable[[], Sequence]) -> None:
        entry = self._entries.get(key)
        if entry is None:
            args = tuple(make_args())
            exe_args, adapted = self.compiled.generate_execution_args(*args)
            # the ctypes values point into `args` and `adapted`: keep them alive as long as the entry
            entry = (exe_args, adapted, args)
            if len(self._entries) >= self.size:
                self._entries.pop(next(iter(self._entries)))
            self._entries[key] = entry
        self.compiled.run_compiled_program(entry[0])

    def __len__(self) -> int:
        return len(self._entries)


def gmem_pointer(dtype, address: int, align: int):
    """A CuTe global-memory pointer of element type `dtype` (a cutlass numeric type) at a raw `address`, which
    the kernel may assume `align`-byte aligned: what our kernels take instead of framework tensors."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr
    return make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=align)


def stream_handle(device: torch.device) -> int:
    """The raw handle (an int) of the current CUDA stream of `device`, without building a torch.cuda.Stream
    (which costs several microseconds per call)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index)
    return torch.cuda.current_stream(index).cuda_stream
