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
    captured once (on a side stream, relaxed mode) and launched from what was captured from then on (with
    `graphs=False`: always from the template). Where the capture is one plain kernel launch, it is *recorded*:
    the function, its dimensions and its parameters' bytes are read back from the graph and relaunched with
    `cuLaunchKernel` (one driver call through ctypes). The key's `reaimable` pointers (an output, say: the
    entries of the key at those positions) are found in those bytes and stored anew before each launch, so a
    recorded launch serves every address they take, and sightings are counted without them. Anything else
    (a cluster launch, several nodes, a driver that cannot describe the parameters) stays a CUDA graph, replayed
    with `cuGraphLaunch` and keyed by every value. Either way the parameters are held by value, so equal keys
    must mean equal arguments. A graph is replayed in order with its own earlier launches, so one argument set
    launched on two streams does not run concurrently;
  * while the stream is capturing (the caller's `torch.cuda.graph`, or `torch.compile(mode="reduce-overhead")`):
    a recorded launch as usual, else from the template, so that the kernel becomes a node of the caller's graph.
    Starting a capture of our own then would invalidate theirs, so none starts.
What it keeps: the last `size` keys seen and templates (host memory: ctypes values and integer addresses, never
a tensor) and at most `max_graphs` recorded launches and executable graphs (device memory, for a graph); the
least recently used goes first.
Launches and captures run with the cache's `device` current, whatever the caller's current device is.
If capture fails, the cache warns once and launches directly from then on; `WORKBOOK_LAUNCH_GRAPHS=0` turns
graphs off.
"""
from __future__ import annotations

import contextlib
import ctypes
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
                 reaimable: Sequence[int] = (), record: bool = True):
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
        # whether captures are still tried as recorded launches, and re-aimed: each goes off for good the first
        # time a capture cannot be recorded, or recorded but not re-aimed (the parameters do not change shape)
        self._recording = record
        self._reaiming = record and bool(self.reaimable)
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
            full_key = (self._base_of(key), stream) if self._reaiming else (key, stream)
            graph = self._graphed.pop(full_key, None)
            sightings = 0
            if graph is not None:
                self._graphed[full_key] = graph        # now the most recently used
                if isinstance(graph, Recorded):        # a plain launch, on any stream, capturing or not
                    self.counts["replayed"] += 1
                    graph.launch(stream, self._aims_of(key) if graph.slots else ())
                    return
            else:
                sightings = self._seen.pop(full_key, 0) + 1
            due = graph is not None or sightings >= self.capture_after
            capturing = due and is_capturing(stream)   # (one driver call, only where it decides something)
            if graph is None and due and self.graphs and not capturing:
                graph = self._capture(full_key, key, make_args)
                if isinstance(graph, Recorded):
                    self.counts["replayed"] += 1
                    graph.launch(stream, self._aims_of(key) if graph.slots else ())
                    return
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

    def _capture(self, full_key, key, make_args):
        """A recorded launch where the capture is one plain kernel launch (re-aimable where the key's reaimable
        pointers were found in its parameters), else an executable graph keyed by every value; None (and no more
        captures) where capturing fails."""
        self.counts["captured"] += 1
        # captured on a side stream: the arguments (which carry the stream) are built for that one
        def enqueue(s):
            _Launch(self.compiled, make_args(s)).launch()
        try:
            graph = None
            if self._recording:
                graph = record_launch(enqueue, self._aims_of(key) if self._reaiming else ())
                self._recording = graph is not None
            if graph is not None and self._reaiming and not graph.slots:
                self._reaiming = False             # found nowhere: key by every value from now on
                full_key = (key, full_key[1])
            elif graph is None:
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
            evicted = self._graphed.pop(oldest)
            if not isinstance(evicted, Recorded):  # a recorded launch holds host memory only
                graph_destroy(evicted)
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


class Recorded:
    """One kernel launch read back from a capture: its function, grid, block and dynamic shared memory, and a
    copy of every parameter's bytes, relaunched with `kernel_launch`. `slots`: where the re-aimable pointers sit
    in those bytes, in the caller's order (empty: none to re-aim)."""

    def __init__(self, func: int, dims: Sequence[int], params: Sequence[bytes],
                 slots: Sequence[tuple[int, int]] = ()):
        self.func, self.dims = func, tuple(dims)
        self._buffers = [ctypes.create_string_buffer(bytes(b), len(b)) for b in params]
        self._array = (ctypes.c_void_p * len(self._buffers))(*map(ctypes.addressof, self._buffers))
        self.params = ctypes.addressof(self._array)
        self.slots = [ctypes.c_uint64.from_buffer(self._buffers[i], offset) for i, offset in slots]

    def parameter(self, index: int) -> bytes:
        return self._buffers[index].raw

    def launch(self, stream: int, addresses: Sequence[int] = ()) -> None:
        """Store `addresses` in the slots (the driver copies the parameters at the launch), then launch."""
        for slot, address in zip(self.slots, addresses):
            slot.value = address
        kernel_launch(self.func, self.dims, self.params, stream)


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


def record_launch(launch_on: Callable[[int], None], addresses: Sequence[int] = ()) -> Recorded | None:
    """What `launch_on(stream)` enqueues, captured (`_capture`) and read back as a Recorded launch, its slots at
    `addresses` (empty where they are not found once each: `find_slots`). None where the capture is anything
    but one kernel launch without a cluster or cooperative launch (`cuLaunchKernel` would drop those), or where
    the driver cannot list the parameters."""
    graph = _capture(launch_on)
    try:
        return _read_kernel(graph, addresses)
    finally:
        cuda.cuGraphDestroy(graph)


def _read_kernel(graph, addresses: Sequence[int]) -> Recorded | None:
    err, _, count = cuda.cuGraphGetNodes(graph, 0)
    if err != _SUCCESS or count != 1:
        return None
    node = _check(cuda.cuGraphGetNodes(graph, 1), "cuGraphGetNodes")[0]
    if _check(cuda.cuGraphNodeGetType(node), "cuGraphNodeGetType") != cuda.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
        return None
    ids = cuda.CUlaunchAttributeID
    err, cluster = cuda.cuGraphKernelNodeGetAttribute(node, ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
    if err != _SUCCESS or max(cluster.clusterDim.x, cluster.clusterDim.y, cluster.clusterDim.z) > 1:
        return None
    err, cooperative = cuda.cuGraphKernelNodeGetAttribute(node, ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE)
    if err != _SUCCESS or cooperative.cooperative:
        return None
    p = _check(cuda.cuGraphKernelNodeGetParams(node), "cuGraphKernelNodeGetParams")
    func = p.func if int(p.func) else _check(cuda.cuKernelGetFunction(p.kern), "cuKernelGetFunction")
    sizes = []
    while True:
        err, _, size = cuda.cuFuncGetParamInfo(func, len(sizes))
        if err != _SUCCESS:
            break
        sizes.append(size)
    if not sizes or not p.kernelParams:
        return None
    params = [ctypes.string_at(ctypes.c_void_p.from_address(p.kernelParams + 8 * i).value, size)
              for i, size in enumerate(sizes)]
    dims = (p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ, p.sharedMemBytes)
    return Recorded(int(func), dims, params, find_slots(params, addresses) or ())


_cuLaunchKernel = None


def kernel_launch(func: int, dims: Sequence[int], params: int, stream: int) -> None:
    """cuLaunchKernel(func, *dims, stream, params, NULL) straight through ctypes: a fraction of the microseconds
    that cuda-python's argument conversion or the compiled host code (which also encodes TMA descriptors) cost."""
    global _cuLaunchKernel
    if _cuLaunchKernel is None:
        f = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
        f.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        f.restype = ctypes.c_int
        _cuLaunchKernel = f
    err = _cuLaunchKernel(func, *dims, stream, params, None)
    if err:
        raise RuntimeError(f"cuLaunchKernel failed: {cuda.CUresult(err)}")


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
