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
  * re-aimed replays: the key's `reaimable` pointers (an output, say: the key's entries at those positions) are
    left out of the key where the capture is one kernel node and each of them is found once among its
    parameters (`find_slots`). A replay whose pointers differ from the graph's stores them there and hands the
    node its new parameters (`cuGraphExecKernelNodeSetParams`), so a new output costs a replay, not a template
    launch (a benchmark's interleaved contenders, a caller without `out=`). Where the pointers are not found,
    the cache keys by every value from then on;
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
import functools
import operator
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
                 max_graphs: int = 16, pointers: int = 0, capture_after: int | None = None,
                 reaimable: Sequence[int] = ()):
        capture_after = CAPTURE_AFTER if capture_after is None else capture_after
        if size < 1 or max_graphs < 1 or pointers < 0 or capture_after < 2:
            raise ValueError(f"size and max_graphs must be >= 1, pointers >= 0 and capture_after >= 2, got {size}, "
                             f"{max_graphs}, {pointers} and {capture_after}")
        if len(set(reaimable)) != len(reaimable) or not all(0 <= i < pointers for i in reaimable):
            raise ValueError(f"reaimable must name distinct pointer positions below pointers={pointers}, "
                             f"got {tuple(reaimable)}")
        self.capture_after = capture_after
        self.reaimable = tuple(sorted(reaimable))
        # the key without its re-aimable entries, and those entries, as tuples (itemgetter: no Python loop)
        self._base_of = _picker(lambda n: [i for i in range(n) if i not in self.reaimable])
        self._aims_of = _picker(lambda n: list(self.reaimable))
        # off for good the first time a capture cannot be re-aimed (the parameters' layout is the function's)
        self._reaiming = bool(self.reaimable)
        self.compiled = compiled
        self.size = size
        self.max_graphs = max_graphs
        self.pointers = pointers
        self.graphs = GRAPHS if graphs is None else graphs
        self.device = device
        # with one GPU visible the current device is this one: no guard, and no current_device() call, per launch
        self._guard = device is not None and not one_gpu()
        # least recently used first, all three
        self._seen: dict[Hashable, int] = {}           # (key, stream) without a graph -> its sightings
        self._graphed: dict[Hashable, object] = {}     # (key, stream) -> executable graph
        self._templates: dict[Hashable, _Launch] = {}  # (key[pointers:], stream) -> marshalled arguments
        # what the calls were: a direct launch of a first sighting, a capture, a replay, or a direct launch of a
        # repeat (inside the caller's capture, or without graphs); a benchmark reads here what it timed
        self.counts = {"first": 0, "captured": 0, "replayed": 0, "direct": 0}

    def __call__(self, key: Hashable, make_args: Callable[[int], Sequence], stream: int) -> None:
        """Launch on `stream` (a raw handle) the call whose arguments `make_args(stream)` builds."""
        with on_device(self.device) if self._guard else _NO_GUARD:
            full_key = (self._base_of(key), stream) if self._reaiming else (key, stream)
            graph = self._graphed.pop(full_key, None)
            sightings = 0
            if graph is not None:
                self._graphed[full_key] = graph        # now the most recently used
            else:
                sightings = self._seen.pop(full_key, 0) + 1
            due = graph is not None or sightings >= self.capture_after
            capturing = due and is_capturing(stream)   # (one driver call, only where it decides something)
            if graph is None and due and self.graphs and not capturing:
                graph = self._capture(full_key, key, make_args)
            if graph is not None and not capturing:
                self.counts["replayed"] += 1
                if isinstance(graph, Reaimable):
                    graph.aim(self._aims_of(key))      # new parameters only where the pointers moved
                    graph = graph.exec
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

    def _capture(self, full_key, key, make_args):
        """The executable graph of this call: re-aimable where the key has reaimable pointers and they are found
        in its one kernel node's parameters, else a plain graph keyed by every value (and so from now on)."""
        self.counts["captured"] += 1
        # captured on a side stream: the arguments (which carry the stream) are built for that one
        def enqueue(s):
            _Launch(self.compiled, make_args(s)).launch()
        try:
            graph = capture_reaimable(enqueue, self._aims_of(key)) if self._reaiming else None
            if graph is None:
                if self._reaiming:
                    self._reaiming = False
                    full_key = (key, full_key[1])
                graph = capture_graph(enqueue)
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


def _picker(positions: Callable[[int], list[int]]) -> Callable[[tuple], tuple]:
    """key -> the tuple of its entries at `positions(len(key))`, one itemgetter per key length."""
    getters: dict[int, Callable[[tuple], tuple]] = {}

    def pick(key: tuple) -> tuple:
        get = getters.get(len(key))
        if get is None:
            chosen = positions(len(key))
            get = getters[len(key)] = (lambda k: ()) if not chosen else \
                (lambda k, g=operator.itemgetter(*chosen): (g(k),)) if len(chosen) == 1 else operator.itemgetter(*chosen)
        return get(key)
    return pick


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
    switch costs host time, which a per-call-synchronised benchmark would count. With one GPU visible it is
    always current, and not even asked for."""
    if index is None or one_gpu() or index == torch.cuda.current_device():
        return _NO_GUARD
    return torch.cuda.device(index)


@functools.lru_cache(maxsize=1)
def one_gpu() -> bool:
    """Whether this process sees exactly one CUDA device (fixed once CUDA is up: CUDA_VISIBLE_DEVICES is read
    at initialisation)."""
    return torch.cuda.device_count() == 1


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


def _capture(launch_on: Callable[[int], None]):
    """Capture what `launch_on(stream)` enqueues on a side stream of the current device; the graph (the caller
    destroys it). Relaxed capture mode, so that the first launch of a kernel may still load its module."""
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
    return _check(cuda.cuStreamEndCapture(handle), "cuStreamEndCapture")


def capture_graph(launch_on: Callable[[int], None]):
    """What `launch_on(stream)` enqueues, captured on a side stream (`_capture`): the executable graph."""
    graph = _capture(launch_on)
    try:
        return _check(cuda.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    finally:
        cuda.cuGraphDestroy(graph)        # the executable graph keeps its own copy


class Reaimable:
    """An executable graph of one kernel node whose re-aimable pointers sit at `slots` of the node's parameters
    (copies held here, in the caller's order); `aim` moves them. The parameters were read from `graph` (kept:
    the node handle is the graph's), and the node's launch settings (cluster, carveout) stay the graph's."""

    def __init__(self, exec_, graph, node, params, buffers: Sequence[bytes], slots: Sequence[tuple[int, int]],
                 aimed: Sequence[int]):
        self.exec, self.graph, self.node, self.params = exec_, graph, node, params
        self._buffers = [ctypes.create_string_buffer(bytes(b), len(b)) for b in buffers]
        self._array = (ctypes.c_void_p * len(self._buffers))(*map(ctypes.addressof, self._buffers))
        params.kernelParams = ctypes.addressof(self._array)
        self.slots = [ctypes.c_uint64.from_buffer(self._buffers[i], offset) for i, offset in slots]
        self.aimed = tuple(aimed)

    def parameter(self, index: int) -> bytes:
        return self._buffers[index].raw

    def aim(self, addresses: tuple) -> None:
        """Point the slots at `addresses` for the next launches (launches already enqueued keep theirs)."""
        if addresses != self.aimed:
            for slot, address in zip(self.slots, addresses):
                slot.value = address
            graph_set_kernel_params(self)
            self.aimed = addresses


# The largest parameter a re-aimed pointer may sit in: a pointer or a small tensor descriptor (pointer, shape,
# strides), never a 128-byte TMA descriptor, whose address field is the driver's encoding, not ours to rewrite.
SLOT_PARAM_MAX_BYTES = 64


def find_slots(params: Sequence[bytes], addresses: Sequence[int]) -> list[tuple[int, int]] | None:
    """(parameter, byte offset) of each address among the parameters' 8-byte aligned words: found exactly once in
    all of them, in a parameter of at most SLOT_PARAM_MAX_BYTES, at distinct places; else None (a coincidence
    or an encoded copy could not be told from the pointer)."""
    slots = []
    for address in addresses:
        word = address.to_bytes(8, "little")
        hits = [(i, o) for i, b in enumerate(params) for o in range(0, len(b) - 7, 8) if b[o:o + 8] == word]
        if len(hits) != 1 or len(params[hits[0][0]]) > SLOT_PARAM_MAX_BYTES or hits[0] in slots:
            return None
        slots.append(hits[0])
    return slots


def capture_reaimable(launch_on: Callable[[int], None], addresses: Sequence[int]) -> Reaimable | None:
    """What `launch_on(stream)` enqueues, captured (`_capture`) and instantiated, re-aimable at `addresses`; None
    (nothing kept) where the capture is not one kernel node, the driver cannot list its parameters, or an
    address is not found once among them (`find_slots`)."""
    graph = _capture(launch_on)
    try:
        found = _kernel_parameters(graph, addresses)
        if found is None:
            cuda.cuGraphDestroy(graph)
            return None
        node, params, buffers, slots = found
        exec_ = _check(cuda.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    except BaseException:
        cuda.cuGraphDestroy(graph)
        raise
    return Reaimable(exec_, graph, node, params, buffers, slots, addresses)


def _kernel_parameters(graph, addresses: Sequence[int]):
    """(node, its CUDA_KERNEL_NODE_PARAMS, each parameter's bytes, the addresses' slots), or None."""
    err, _, count = cuda.cuGraphGetNodes(graph, 0)
    if err != _SUCCESS or count != 1:
        return None
    node = _check(cuda.cuGraphGetNodes(graph, 1), "cuGraphGetNodes")[0]
    if _check(cuda.cuGraphNodeGetType(node), "cuGraphNodeGetType") != cuda.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
        return None
    params = _check(cuda.cuGraphKernelNodeGetParams(node), "cuGraphKernelNodeGetParams")
    func = params.func if int(params.func) else _check(cuda.cuKernelGetFunction(params.kern), "cuKernelGetFunction")
    sizes = []
    while True:
        err, _, size = cuda.cuFuncGetParamInfo(func, len(sizes))
        if err != _SUCCESS:
            break
        sizes.append(size)
    if not sizes or not params.kernelParams:
        return None
    buffers = [ctypes.string_at(ctypes.c_void_p.from_address(params.kernelParams + 8 * i).value, size)
               for i, size in enumerate(sizes)]
    slots = find_slots(buffers, addresses)
    return None if slots is None else (node, params, buffers, slots)


def graph_set_kernel_params(graph: Reaimable) -> None:
    """Hand a re-aimable graph's node its parameters as they now stand (the driver copies them)."""
    _check(cuda.cuGraphExecKernelNodeSetParams(graph.exec, graph.node, graph.params),
           "cuGraphExecKernelNodeSetParams")


def graph_launch(graph_exec, stream: int) -> None:
    _check(cuda.cuGraphLaunch(graph_exec, stream), "cuGraphLaunch")


def graph_destroy(graph) -> None:
    """Release an executable graph, or a Reaimable's executable graph and the graph it was read from."""
    if isinstance(graph, Reaimable):
        cuda.cuGraphExecDestroy(graph.exec)
        cuda.cuGraphDestroy(graph.graph)
    else:
        cuda.cuGraphExecDestroy(graph)


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


@functools.lru_cache(maxsize=None)
def sm_count(device: int) -> int:
    """The SMs of CUDA device `device` (an index): what a persistent grid sizes itself by."""
    return torch.cuda.get_device_properties(device).multi_processor_count


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
