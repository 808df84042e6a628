"""Launching a compiled CuTe DSL function with little host time: marshal arguments once, patch them, replay them.

    launches = LaunchCache(compiled, device=0, pointers=2)     # one per compiled function and device
    launches((addr_a, addr_b, M), lambda s: (ptr_a, ptr_b, Int32(M), CUstream(s)), stream)
        # key: every value the arguments encode except the stream, its first `pointers` entries the addresses
        # of the first pointer arguments, in order; make_args builds the arguments for stream handle s

Why it matters. A per-call synchronised timing (`workbook.timing.bench`) synchronises after every call, so
everything the host does between the start event and the launch is inside the measured latency. On the H200 a
call of the compiled function cost 26-29 us of host time, 11-12 us of which is the compiled host code itself
(TMA descriptor encodes and `cuLaunchKernelEx`); the rest is Python turning pointers and Int32s into ctypes
(`generate_execution_args`). Building the arguments (`make_ptr`, `cutlass.Int32`) costs as much again, so a
first sighting of an argument set cost ~80 us where a CUDA graph replay costs a few (`notes/perf-log.md`).

What a call does, per argument set (keyed by the values it encodes and the stream):
  * first sighting: launch directly from a marshalled *template*, one per stream and per value of the key's
    part after the pointers (the sizes): the template's pointer fields are overwritten in place with this
    key's addresses (a ctypes store each), so a new tensor at every call (a fresh output, a Lloyd loop, a
    training step) costs the compiled host code and no marshalling. With `pointers=0` every key has its own
    template (marshalled once per key);
  * repeats: from the template too, until the set's `capture_after`-th sighting (`CAPTURE_AFTER`); then it is
    captured once into a CUDA graph (on a side stream, relaxed mode) and replayed from then on with
    `cuGraphLaunch`, one driver call (with `graphs=False`: always from the template). The graph holds the
    kernel's parameters by value, so equal keys must mean equal arguments. A graph is replayed in order with
    its own earlier launches, so one argument set launched on two streams does not run concurrently;
  * while the stream is capturing (the caller's `torch.cuda.graph`, or `torch.compile(mode="reduce-overhead")`):
    launch from the template, so that the kernel becomes a node of the caller's graph. Starting a capture of
    our own then would invalidate theirs.
What it keeps: the last `size` keys seen and templates (host memory: ctypes values and integer addresses, never
a tensor) and at most `max_graphs` executable graphs (device memory); the least recently used goes first.
Launches and captures run with the cache's `device` current, whatever the caller's current device is.
If capture fails, the cache warns once and launches directly from then on; `WORKBOOK_LAUNCH_GRAPHS=0` turns
graphs off.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import warnings
from typing import Callable, Hashable, Sequence

import cuda.bindings.driver as cuda
import torch

GRAPHS = os.environ.get("WORKBOOK_LAUNCH_GRAPHS", "1") != "0"
# The sighting of an argument set at which it is captured. A capture (arguments built and marshalled, capture,
# instantiate) costs on the order of 150 us of host time and a replay saves ~6 us against a template launch
# (`notes/perf-log.md`), so a graph pays after a few dozen replays: a set seen this often is in steady use, while
# outputs that the allocator hands out at new addresses now and then never pay for a capture.
CAPTURE_AFTER = 8


class LaunchCache:
    """Calls of one compiled CuTe DSL function on one device: direct launches from patched templates, and a
    CUDA graph for each argument set that repeats."""

    def __init__(self, compiled, size: int = 64, graphs: bool | None = None, *, device: int | None = None,
                 max_graphs: int = 16, pointers: int = 0, capture_after: int | None = None):
        capture_after = CAPTURE_AFTER if capture_after is None else capture_after
        if size < 1 or max_graphs < 1 or pointers < 0 or capture_after < 2:
            raise ValueError(f"size and max_graphs must be >= 1, pointers >= 0 and capture_after >= 2, got {size}, "
                             f"{max_graphs}, {pointers} and {capture_after}")
        self.capture_after = capture_after
        self.compiled = compiled
        self.size = size
        self.max_graphs = max_graphs
        self.pointers = pointers
        self.graphs = GRAPHS if graphs is None else graphs
        self.device = device
        # least recently used first, all three
        self._seen: dict[Hashable, int] = {}           # (key, stream) without a graph -> its sightings
        self._graphed: dict[Hashable, object] = {}     # (key, stream) -> executable graph
        self._templates: dict[Hashable, _Launch] = {}  # (key[pointers:], stream) -> marshalled arguments
        # what the calls were: a direct launch of a first sighting, a capture, a replay, or a direct launch of a
        # repeat (inside the caller's capture, or without graphs); a benchmark reads here what it timed
        self.counts = {"first": 0, "captured": 0, "replayed": 0, "direct": 0}

    def __call__(self, key: Hashable, make_args: Callable[[int], Sequence], stream: int) -> None:
        """Launch on `stream` (a raw handle) the call whose arguments `make_args(stream)` builds."""
        with on_device(self.device):
            full_key = (key, stream)
            graph = self._graphed.pop(full_key, None)
            sightings = 0
            if graph is not None:
                self._graphed[full_key] = graph        # now the most recently used
            else:
                sightings = self._seen.pop(full_key, 0) + 1
            due = graph is not None or sightings >= self.capture_after
            capturing = due and is_capturing(stream)   # (one driver call, only where it decides something)
            if graph is None and due and self.graphs and not capturing:
                graph = self._capture(full_key, make_args)
            if graph is not None and not capturing:
                self.counts["replayed"] += 1
                graph_launch(graph, stream)
                return
            if graph is None:
                self._remember(full_key, sightings)
            self.counts["first" if sightings == 1 else "direct"] += 1
            self._template(key, make_args, stream).launch()

    def _remember(self, full_key, sightings: int) -> None:
        self._seen[full_key] = sightings
        if len(self._seen) > self.size:
            del self._seen[next(iter(self._seen))]

    def _template(self, key, make_args, stream: int) -> "_Launch":
        """The marshalled arguments for `key` on `stream`: a template of its sizes, its pointers patched."""
        n = self.pointers
        tkey = (key[n:] if n else key, stream)
        found = self._templates.pop(tkey, None)
        if found is not None and found.patch(key[:n] if n else ()):
            self._templates[tkey] = found
            return found
        found = _Launch(self.compiled, make_args(stream), n)
        self._templates[tkey] = found
        if len(self._templates) > self.size:
            del self._templates[next(iter(self._templates))]
        return found

    def _capture(self, full_key, make_args):
        self.counts["captured"] += 1
        try:
            # captured on a side stream: the arguments (which carry the stream) are built for that one
            graph = capture_graph(lambda s: _Launch(self.compiled, make_args(s)).launch())
        except Exception as e:   # capture unsupported here: launch directly from now on
            warnings.warn(f"CUDA graph capture failed ({e}); launching without graphs", RuntimeWarning)
            self.graphs = False
            return None
        self._graphed[full_key] = graph
        if len(self._graphed) > self.max_graphs:
            # never inside the caller's capture (we capture only outside one), which a destroy would invalidate
            oldest = next(iter(self._graphed))
            graph_destroy(self._graphed.pop(oldest))
            self._remember(oldest, self.capture_after - 1)   # captured again if it repeats
        return graph

    def __len__(self) -> int:
        return len(self._seen) + len(self._graphed)

    @property
    def graph_count(self) -> int:
        return len(self._graphed)


class _Launch:
    """Marshalled arguments (the stream baked in) and the compiled host code that launches them; the first
    `pointers` pointer arguments can be re-aimed in place (`patch`)."""

    def __init__(self, compiled, args: Sequence, pointers: int = 0):
        self.compiled = compiled
        self.args = tuple(args)
        # the ctypes values point into `args` and `adapted`: keep them alive as long as the entry
        self.exe_args, self.adapted = compiled.generate_execution_args(*self.args)
        # a CuTe pointer argument marshals as the address of its ctypes c_void_p (`_desc`): storing a new
        # address there re-aims the launch. Only where the marshalled arguments do point there (no adapter).
        slots = [a._desc for a in self.args if isinstance(getattr(a, "_desc", None), ctypes.c_void_p)][:pointers]
        marshalled = {v for v in self.exe_args if isinstance(v, int)}
        self.slots = slots if len(slots) == pointers and all(ctypes.addressof(d) in marshalled for d in slots) \
            else None

    def patch(self, addresses: Sequence[int]) -> bool:
        """Aim the pointer arguments at `addresses`; False where this launch cannot be re-aimed."""
        if self.slots is None:
            return False
        for slot, address in zip(self.slots, addresses):
            slot.value = address
        return True

    def launch(self) -> None:
        self.compiled.run_compiled_program(self.exe_args)


_NO_GUARD = contextlib.nullcontext()


def on_device(index: int | None):
    """A guard that makes CUDA device `index` current, or nothing when it already is (or index is None): the
    switch costs host time, which a per-call-synchronised benchmark would count."""
    if index is None or index == torch.cuda.current_device():
        return _NO_GUARD
    return torch.cuda.device(index)


# ---- the driver calls behind the cache (module functions, so CPU tests can stand in for them)

_SUCCESS = cuda.CUresult.CUDA_SUCCESS
_NOT_CAPTURING = cuda.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
_capture_streams: dict[int, torch.cuda.Stream] = {}


def _check(result, what: str):
    err, *rest = result
    if err != _SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")
    return rest[0] if rest else None


def is_capturing(stream: int) -> bool:
    """Whether `stream` (a raw handle) is capturing into a CUDA graph, or was and the capture broke: one driver
    call, no torch.cuda.Stream object. An error (the legacy stream while another stream captures) counts as
    capturing too: it is no time to start a capture of our own."""
    err, status = cuda.cuStreamIsCapturing(stream)
    return err != _SUCCESS or status != _NOT_CAPTURING


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
