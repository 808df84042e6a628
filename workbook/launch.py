"""Launching a compiled CuTe DSL function with little host time: marshal each argument set once, replay it.

    launches = LaunchCache(compiled)                 # one per compiled function
    launches(key, lambda s: (ptr_a, ptr_b, Int32(M), CUstream(s)), stream)
        # key: every value the arguments encode except the stream; make_args builds them for stream handle s

Why it matters. The seeds' timing method synchronises after every call, so everything the host does between
the start event and the launch is inside the measured latency. On the H200 machine (probe of 2026-11-30,
`notes/perf-log.md`) a call of the compiled function cost 26-29 us of host time, 11-12 us of which is the
compiled host code itself (TMA descriptor encodes and `cuLaunchKernelEx`); the rest is Python turning
pointers and Int32s into ctypes (`generate_execution_args`). Our own wrappers added another 50-60 us
(`make_ptr`, `cutlass.Int32`, `torch.cuda.current_stream`), so a 40 us kernel was timed at 80-90 us and the
4096^3 GEMM lost 20 % to cuBLAS in the synchronised timing while matching it back to back.

Two levels of caching, per argument set (FIFO of the last `size` sets, keyed by the values they encode):
  * marshalled arguments: a hit skips all argument building and calls the compiled host code, which still
    encodes the TMA descriptors and launches (about 10 us on the H200 machine's CPU);
  * with `graphs=True` (the default), that one launch is captured once into a CUDA graph, and a hit replays
    it with `cuGraphLaunch`: the descriptors were encoded at capture, so a call costs one driver call. The
    graph holds the kernel's parameters by value, so the key must hold every value the arguments carry:
    equal keys must mean equal arguments. A graph is replayed in order with its own earlier launches, so
    the same argument set launched on two streams does not run concurrently. If capture fails, the cache
    warns once and launches directly from then on; `WORKBOOK_LAUNCH_GRAPHS=0` turns graphs off.
"""
from __future__ import annotations

import os
import warnings
from typing import Callable, Hashable, Sequence

import cuda.bindings.driver as cuda
import torch

GRAPHS = os.environ.get("WORKBOOK_LAUNCH_GRAPHS", "1") != "0"


class LaunchCache:
    """Calls of one compiled CuTe DSL function, each argument set marshalled (and captured) once."""

    def __init__(self, compiled, size: int = 64, graphs: bool | None = None):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.compiled = compiled
        self.size = size
        self.graphs = GRAPHS if graphs is None else graphs
        self._entries: dict[Hashable, _Launch] = {}

    def __call__(self, key: Hashable, make_args: Callable[[int], Sequence], stream: int) -> None:
        """Launch on `stream` (a raw handle) the call whose arguments `make_args(stream)` builds."""
        entry = self._entries.get((key, stream))
        if entry is None:
            entry = self._add((key, stream), make_args, stream)
        entry.launch(stream)

    def _add(self, full_key, make_args, stream) -> "_Launch":
        entry = None
        if self.graphs:
            try:
                entry = _GraphLaunch(self.compiled, make_args)
            except Exception as e:   # capture unsupported here: launch directly from now on
                warnings.warn(f"CUDA graph capture failed ({e}); launching without graphs", RuntimeWarning)
                self.graphs = False
        if entry is None:
            entry = _DirectLaunch(self.compiled, make_args(stream))
        if len(self._entries) >= self.size:
            self._entries.pop(next(iter(self._entries))).close()
        self._entries[full_key] = entry
        return entry

    def __len__(self) -> int:
        return len(self._entries)


class _Launch:
    def launch(self, stream: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _DirectLaunch(_Launch):
    """Marshalled arguments (the stream baked in) and the compiled host code that launches them."""

    def __init__(self, compiled, args: Sequence):
        self.compiled = compiled
        self.args = tuple(args)
        # the ctypes values point into `args` and `adapted`: keep them alive as long as the entry
        self.exe_args, self.adapted = compiled.generate_execution_args(*self.args)

    def launch(self, stream: int) -> None:
        self.compiled.run_compiled_program(self.exe_args)


class _GraphLaunch(_Launch):
    """One launch of the compiled function, captured on a side stream into an executable CUDA graph."""

    def __init__(self, compiled, make_args):
        self.exec = capture_graph(lambda s: _DirectLaunch(compiled, make_args(s)).launch(s))

    def launch(self, stream: int) -> None:
        graph_launch(self.exec, stream)

    def close(self) -> None:
        if self.exec is not None:
            graph_destroy(self.exec)
            self.exec = None


# ---- the three driver calls behind _GraphLaunch (module functions, so CPU tests can stand in for them)

_SUCCESS = cuda.CUresult.CUDA_SUCCESS
_capture_streams: dict[int, torch.cuda.Stream] = {}


def _check(result, what: str):
    err, *rest = result
    if err != _SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")
    return rest[0] if rest else None


def capture_graph(launch_on: Callable[[int], None]):
    """Capture what `launch_on(stream)` enqueues on a side stream of the current device; the executable graph.
    Relaxed capture mode, so that the first launch of a kernel may still load its module."""
    device = torch.cuda.current_device()
    side = _capture_streams.get(device)
    if side is None:
        side = _capture_streams[device] = torch.cuda.Stream(device)
    handle = side.cuda_stream
    _check(cuda.cuStreamBeginCapture(handle, cuda.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
           "cuStreamBeginCapture")
    try:
        launch_on(handle)
    except BaseException:
        cuda.cuStreamEndCapture(handle)   # leave the side stream usable; the launch's error is the news
        raise
    graph = _check(cuda.cuStreamEndCapture(handle), "cuStreamEndCapture")
    try:
        return _check(cuda.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    finally:
        cuda.cuGraphDestroy(graph)        # the executable graph keeps its own copy


def graph_launch(graph_exec, stream: int) -> None:
    _check(cuda.cuGraphLaunch(graph_exec, stream), "cuGraphLaunch")


def graph_destroy(graph_exec) -> None:
    cuda.cuGraphExecDestroy(graph_exec)


def gmem_pointer(dtype, address: int, align: int):
    """A CuTe global-memory pointer of element type `dtype` (a cutlass numeric type) at a raw `address`, which
    the kernel may assume `align`-byte aligned: what our kernels take instead of framework tensors."""
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr
    return make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=align)


def stream_handle(device: torch.device | int) -> int:
    """The raw handle (an int) of the current CUDA stream of `device` (a torch.device or an index), without
    building a torch.cuda.Stream (which costs several microseconds per call)."""
    index = device if isinstance(device, int) else device.index
    if index is None:
        index = torch.cuda.current_device()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index)
    return torch.cuda.current_stream(index).cuda_stream
