"""Launching a compiled CuTe DSL function with little host time: marshal each argument set once, replay it.

    launches = LaunchCache(compiled, device=0)       # one per compiled function and device
    launches(key, lambda s: (ptr_a, ptr_b, Int32(M), CUstream(s)), stream)
        # key: every value the arguments encode except the stream; make_args builds them for stream handle s

Why it matters. A per-call synchronised timing (`workbook.timing.bench`) synchronises after every call, so
everything the host does between the start event and the launch is inside the measured latency. On the H200 a
call of the compiled function cost 26-29 us of host time, 11-12 us of which is the compiled host code itself
(TMA descriptor encodes and `cuLaunchKernelEx`); the rest is Python turning pointers and Int32s into ctypes
(`generate_execution_args`). Our own wrappers added another 50-60 us (`make_ptr`, `cutlass.Int32`,
`torch.cuda.current_stream`), so a 40 us kernel was timed at 80-90 us, and a large matrix product that matched
the vendor library back to back lost 20 % to it in the synchronised timing (`notes/perf-log.md`).

What a call does, per argument set (keyed by the values it encodes and the stream):
  * first sighting: marshal the arguments and launch directly. A first call costs what a plain launch costs,
    so code that brings new tensors at every step (training, a Lloyd loop) pays nothing for the cache;
  * a repeat: the marshalled arguments are reused (the compiled host code still encodes the TMA descriptors,
    about 10 us); with `graphs=True` (the default) that launch is also captured once into a CUDA graph (on a
    side stream, relaxed mode) and replayed from then on with `cuGraphLaunch`, one driver call. The graph holds
    the kernel's parameters by value, so equal keys must mean equal arguments. A graph is replayed in order
    with its own earlier launches, so one argument set launched on two streams does not run concurrently;
  * while the stream is capturing (the caller's `torch.cuda.graph`, or `torch.compile(mode="reduce-overhead")`):
    launch directly, so that the kernel becomes a node of the caller's graph. Starting a capture of our own
    then would invalidate theirs.
What it keeps: the last `size` argument sets marshalled (host memory: ctypes values and integer addresses,
never a tensor), of which at most `max_graphs` hold an executable graph (device memory); the oldest goes first.
Launches and captures run with the cache's `device` current, whatever the caller's current device is.
If capture fails, the cache warns once and launches directly from then on; `WORKBOOK_LAUNCH_GRAPHS=0` turns
graphs off.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import warnings
from typing import Callable, Hashable, Sequence

import cuda.bindings.driver as cuda
import torch

GRAPHS = os.environ.get("WORKBOOK_LAUNCH_GRAPHS", "1") != "0"


class LaunchCache:
    """Calls of one compiled CuTe DSL function on one device, each argument set marshalled once, and captured
    into a CUDA graph once it repeats."""

    def __init__(self, compiled, size: int = 64, graphs: bool | None = None, *, device: int | None = None,
                 max_graphs: int = 16):
        if size < 1 or max_graphs < 1:
            raise ValueError(f"size and max_graphs must be >= 1, got {size} and {max_graphs}")
        self.compiled = compiled
        self.size = size
        self.max_graphs = max_graphs
        self.graphs = GRAPHS if graphs is None else graphs
        self.device = device
        self._entries: dict[Hashable, _Launch] = {}   # least recently used first
        self._graphed: dict[Hashable, None] = {}     # keys of the entries that hold a graph, least recently used first
        # what the calls were: a first sighting (a plain launch), a capture, a replay, or a plain launch of a
        # marshalled set (inside the caller's capture, or without graphs); a benchmark of many argument sets
        # reads here whether it timed replays
        self.counts = {"first": 0, "captured": 0, "replayed": 0, "direct": 0}

    def __call__(self, key: Hashable, make_args: Callable[[int], Sequence], stream: int) -> None:
        """Launch on `stream` (a raw handle) the call whose arguments `make_args(stream)` builds."""
        with on_device(self.device):
            full_key = (key, stream)
            entry = self._entries.pop(full_key, None)
            if entry is None:                      # first sighting: a plain launch, and remember it
                self.counts["first"] += 1
                self._add(full_key, _Launch(self.compiled, make_args(stream)), stream).launch()
                return
            self._entries[full_key] = entry        # now the most recently used
            if is_capturing(stream):               # the caller's graph: our launch becomes one of its nodes
                self.counts["direct"] += 1
                entry.launch()
                return
            if entry.graph is None and self.graphs:
                self.counts["captured"] += 1
                self._capture(full_key, entry, make_args)   # a repeat: worth a graph
            elif entry.graph is not None:
                self._graphed[full_key] = self._graphed.pop(full_key)
            if entry.graph is not None:
                self.counts["replayed"] += 1
                graph_launch(entry.graph, stream)
            else:
                self.counts["direct"] += 1
                entry.launch()

    def _add(self, full_key, entry: "_Launch", stream: int) -> "_Launch":
        if len(self._entries) >= self.size:
            oldest = next(iter(self._entries))
            self._graphed.pop(oldest, None)
            evicted = self._entries.pop(oldest)
            if evicted.graph is not None and is_capturing(stream):
                # destroying a graph inside the caller's capture invalidates that capture: later, outside it
                _retired.append(evicted.graph)
                evicted.graph = None
            evicted.close()
        if _retired and not is_capturing(stream):
            while _retired:
                graph_destroy(_retired.pop())
        self._entries[full_key] = entry
        return entry

    def _capture(self, full_key, entry: "_Launch", make_args) -> None:
        try:
            # captured on a side stream: the arguments (which carry the stream) are built for that one
            entry.graph = capture_graph(lambda s: _Launch(self.compiled, make_args(s)).launch())
        except Exception as e:   # capture unsupported here: launch directly from now on
            warnings.warn(f"CUDA graph capture failed ({e}); launching without graphs", RuntimeWarning)
            self.graphs = False
            return
        self._graphed[full_key] = None
        if len(self._graphed) > self.max_graphs:
            oldest = next(iter(self._graphed))
            del self._graphed[oldest]
            self._entries[oldest].close()           # back to a marshalled launch; captured again if it repeats

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def graph_count(self) -> int:
        return len(self._graphed)


class _Launch:
    """Marshalled arguments (the stream baked in), the compiled host code that launches them, and the
    executable graph of that launch once it has been captured."""

    def __init__(self, compiled, args: Sequence):
        self.compiled = compiled
        self.args = tuple(args)
        # the ctypes values point into `args` and `adapted`: keep them alive as long as the entry
        self.exe_args, self.adapted = compiled.generate_execution_args(*self.args)
        self.graph = None

    def launch(self) -> None:
        self.compiled.run_compiled_program(self.exe_args)

    def close(self) -> None:
        if self.graph is not None:
            graph_destroy(self.graph)
            self.graph = None


_NO_GUARD = contextlib.nullcontext()
_retired: list = []   # graphs evicted during a caller's capture, destroyed at the next eviction outside one


def on_device(index: int | None):
    """A guard that makes CUDA device `index` current, or nothing when it already is (or index is None): the
    switch costs host time, which a per-call-synchronised benchmark would count."""
    if index is None or index == torch.cuda.current_device():
        return _NO_GUARD
    return torch.cuda.device(index)


# ---- the driver calls behind the cache (module functions, so CPU tests can stand in for them)
# The two calls made on every repeat (is the stream capturing? launch the graph) go straight to libcuda through
# ctypes: through cuda-python's bindings each costs microseconds of argument conversion, which a per-call
# synchronised benchmark of a small kernel counts. The rare ones (capture, instantiate) stay in cuda-python.

_SUCCESS = cuda.CUresult.CUDA_SUCCESS
_NOT_CAPTURING = int(cuda.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)
_capture_streams: dict[int, torch.cuda.Stream] = {}


def _check(result, what: str):
    err, *rest = result
    if err != _SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")
    return rest[0] if rest else None


@functools.lru_cache(maxsize=1)
def _libcuda():
    """The driver library with the prototypes of the calls made per launch (loaded on first use: a machine
    without a GPU never needs it)."""
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuGraphLaunch.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
    lib.cuStreamIsCapturing.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))
    lib.cuGraphExecDestroy.argtypes = (ctypes.c_void_p,)
    for f in (lib.cuGraphLaunch, lib.cuStreamIsCapturing, lib.cuGraphExecDestroy):
        f.restype = ctypes.c_int
    return lib


def is_capturing(stream: int) -> bool:
    """Whether `stream` (a raw handle) is capturing into a CUDA graph, or was and the capture broke: one driver
    call, no torch.cuda.Stream object. An error (the legacy stream while another stream captures) counts as
    capturing too: it is no time to start a capture of our own."""
    status = ctypes.c_int()
    err = _libcuda().cuStreamIsCapturing(stream, ctypes.byref(status))
    return err != 0 or status.value != _NOT_CAPTURING


def capture_graph(launch_on: Callable[[int], None]) -> int:
    """Capture what `launch_on(stream)` enqueues on a side stream of the current device; the executable graph's
    raw handle. Relaxed capture mode, so that the first launch of a kernel may still load its module."""
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
        return int(_check(cuda.cuGraphInstantiate(graph, 0), "cuGraphInstantiate"))
    finally:
        cuda.cuGraphDestroy(graph)        # the executable graph keeps its own copy


def graph_launch(graph_exec: int, stream: int) -> None:
    err = _libcuda().cuGraphLaunch(graph_exec, stream)
    if err:
        raise RuntimeError(f"cuGraphLaunch failed: {cuda.CUresult(err)}")


def graph_destroy(graph_exec: int) -> None:
    _libcuda().cuGraphExecDestroy(graph_exec)


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


def first_calls(fns: dict, make_inputs: Callable[[int], Sequence], calls: int = 20, warmup: int = 10) -> dict:
    """What a call costs on inputs it has never seen (training-style code: new tensors at every step) and on
    inputs it has (a benchmark's steady state), by the per-call synchronised timing (`workbook.timing.bench`).

    `fns`: {key: fn}; `make_inputs(i)`: a fresh argument tuple. Returns {key: (first, steady, outputs)}, two
    `workbook.timing.Timing`s and the outputs of the first calls (to check them): `first` is `calls` calls,
    each on its own fresh inputs, all held alive at once so that no address repeats; `steady` is `calls` calls
    on one input set after `warmup` calls (compiling, loading modules and cuBLAS heuristics happen there, as
    they are no first call's cost). Every contender sees the same inputs."""
    from workbook import timing
    warm = tuple(make_inputs(calls))
    fresh = [tuple(make_inputs(i)) for i in range(calls)]
    found = {}
    for key, fn in fns.items():
        steady = timing.bench(fn, [warm], warmup=warmup, iters=calls)
        outputs = []
        first = timing.bench(lambda *args, fn=fn: outputs.append(fn(*args)), fresh, warmup=0, iters=calls)
        found[key] = (first, steady, outputs)
    return found
