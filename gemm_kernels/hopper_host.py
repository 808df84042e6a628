"""The Hopper GEMM from the host: check the operands, plan and compile once per shape and options, launch.

    c = gemm(a, b)                                      # a [M, K] @ b [K, N], bf16 or fp16, on an H100/H200
    c = gemm(a, b, Options(schedule="uniform"))         # any `hopper_options.Options` ...
    c = gemm(a, b, cluster_m=1, out=c)                  # ... or its fields by name, over the default
    c = gemm(a, b, autotune=True)                       # the fastest of `rule.contenders`, timed once per shape
    c = gemm(a, b, swap_ab=True, epilogue="staged", tile=(128, 288, 64), cluster_m=4)   # c^T = b^T a^T
    art = compile_gemm(4096, 4096, 4096)                # no GPU needed: workbook.sass.Artifacts
    c, frame = timeline(a, b)                           # the traced build: every CTA's rows (hopper_trace)

A call's shape, dtype and options fix everything but the data: the plan (`hopper_options.plan_for`), the work list
(`hopper_worklist.work_rows`) on the device, the compiled kernel (`hopper.HopperGemm` for its `Config`; one
compile serves every shape) and its launch cache (`workbook.launch`: marshalled arguments, then a CUDA graph
replay). `_prepare` works that out once per (shape, device, options, dtype), so a repeated call costs a cache
lookup, the operand checks and a graph launch.
"""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, field

import cuda.bindings.driver as cuda_driver
import torch

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_stream

from gemm_kernels import check_operand, configs, rule
from gemm_kernels.hopper import ELEMENT_TYPES, HopperGemm
from gemm_kernels.hopper_options import (ALIGN, ARCH, DTYPES, TILE_K, Config, Options, check_shape, config_for,
                                         split_k_slots)
from gemm_kernels.hopper_trace import TRACE_COLS, trace_frame
from gemm_kernels.hopper_worklist import band_rows_for, work_rows
from workbook import launch, timing


# Entries of the per-call look-ups (`_prepare`, and by signature `_operands`, `_call_for`) before the oldest go
# (or, by signature, all start afresh): a program calls a few shapes over and over, and a sweep of thousands
# must not grow them without bound.
SIGNATURES = 64


@dataclass(frozen=True)
class _Call:
    """Everything about a GEMM call that its shape, dtype and options fix, worked out once (`_prepare`)."""
    cfg: Config
    plan: object          # gemm_kernels.waves.Plan
    work: torch.Tensor    # the work list on the device, [rows, SEGMENT_COLS * segments] int32 (`work_rows`)
    launches: launch.LaunchCache
    sizes: tuple          # (M, N, K, rows, CTAs): the kernel's size arguments
    out_like: torch.Tensor | None = None   # one element of c's dtype on the device, expanded to [M, N] (`gemm`)
    partial_slots: int = 0   # stream-K workspace slots (0: no stream-K)
    scratches: dict = field(default_factory=dict)   # stream -> (counter and flags, partial sums)
    tails: dict = field(default_factory=dict)       # stream -> the launch key after a, b and c (`tail`)

    def scratch(self, stream: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For launches on `stream`: the [next item, clusters done, stream-K flags...] int32 counter, zero
        between launches (the last cluster resets the first two, each FINISH its flag), the fp32 stream-K
        workspace (one tile_m x tile_n partial per CTA of each slot) and, with `cfg.trace`, the int64 timeline
        [CTAs, TRACE_COLS]. One set per stream: launches on one stream never overlap, launches on two could."""
        found = self.scratches.get(stream)
        if found is None:
            cfg, device = self.cfg, self.work.device
            slots = self.partial_slots
            # one flag per consumer warpgroup of each CTA of each slot (`HopperGemm.settle`)
            counter = torch.zeros(2 + slots * cfg.cluster_size * cfg.consumer_warpgroups, dtype=torch.int32,
                                  device=device)
            partials = (torch.empty(slots * cfg.cluster_size * cfg.tile_m * cfg.tile_n, dtype=torch.float32,
                                    device=device)
                        if slots else counter)   # never read without stream-K
            trace = (torch.zeros(self.sizes[4], TRACE_COLS, dtype=torch.int64, device=device) if cfg.trace
                     else counter)               # never written without the trace
            found = self.scratches[stream] = (counter, partials, trace)
        return found

    def tail(self, stream: int) -> tuple:
        """The kernel's arguments after a, b and c for launches on `stream`, as the launch key holds them: the
        work list's and the scratch tensors' addresses, then `sizes`. Fixed per call and stream, so worked out
        once (a repeated call pays for a, b and c's addresses only)."""
        found = self.tails.get(stream)
        if found is None:
            found = self.tails[stream] = (self.work.data_ptr(), *(t.data_ptr() for t in self.scratch(stream)),
                                          *self.sizes)
        return found


@functools.lru_cache(maxsize=SIGNATURES)
def _prepare(M: int, N: int, K: int, device: int, options: Options, dtype: torch.dtype) -> _Call:
    """Check the shape and the GPU, plan the work list and compile the kernel, once per shape, device, options
    and dtype (planning is Python, milliseconds; the compile is seconds): a call then only reads this back."""
    check_shape(M, N, K)
    if torch.cuda.get_device_capability(device) != (9, 0):
        raise ValueError(f"this kernel is for sm_90a (H100/H200); {torch.cuda.get_device_name(device)} is not")
    cfg, plan = config_for(M, N, options, dtype=dtype)
    band_rows = band_rows_for(K, cfg.tile_m) if options.band_rows is None else options.band_rows
    k_blocks = -(-K // TILE_K)
    cut_for = split_k_slots(options, len(plan.items), plan.slots, k_blocks)
    rows, partial_slots = work_rows(plan.items, band_rows, cut_for, k_blocks, cfg.stream_k, cfg.tile_m)
    work = torch.tensor(rows, dtype=torch.int32, device=torch.device("cuda", device))
    slots = min(len(rows), plan.slots) if options.persistent else len(rows)
    # swapped, the kernel computes the (N, M) problem c^T = b^T a^T (`_launch` passes b as its a)
    sizes = ((N, M) if cfg.swap_ab else (M, N)) + (K, len(rows), slots * cfg.cluster_size)
    out_like = torch.empty(1, dtype=dtype, device=work.device).expand(M, N)
    return _Call(cfg, plan, work, _launches(cfg, device), sizes, out_like, partial_slots)


def _call_for(M: int, N: int, K: int, device: int, options: Options | None = None, *,
              dtype: torch.dtype = torch.bfloat16, **overrides) -> _Call:
    if options is None and not overrides:
        return _rule_call(M, N, K, device, dtype)
    return _prepare(M, N, K, device, _options_for(M, N, K, options, overrides), dtype)


@functools.lru_cache(maxsize=SIGNATURES)
def _rule_call(M: int, N: int, K: int, device: int, dtype: torch.dtype) -> _Call:
    """The _Call of a call with no options (`_options_for`: the rule's choice), looked up by the sizes alone: no
    Options to hash at every call."""
    return _prepare(M, N, K, device, _options_for(M, N, K, None, {}), dtype)


def clear_caches() -> None:
    """Forget every prepared call, compiled kernel, checked signature and tuned choice (tests that change how
    calls launch)."""
    for cached in (_prepare, _rule_call, _launches):
        cached.cache_clear()
    _signatures.clear()
    _tuned.clear()


# autotune: AUTOTUNE_ROUNDS cycles of `workbook.timing.cycles`, each contender AUTOTUNE_CALLS calls back to back
AUTOTUNE_ROUNDS, AUTOTUNE_CALLS = 3, 10
_tuned: dict = {}   # (M, N, K, device, dtype) -> the _Call autotune chose


def _tuned_call(a: torch.Tensor, b: torch.Tensor, M: int, N: int, K: int, device: int) -> _Call:
    """The _Call of the fastest of `rule.contenders(M, N, K)` on these operands, each as `gemm(a, b)` would run it
    (`rule.as_run`), timed on the first call of the shape (and dtype and device) in this process and remembered;
    candidates that refuse the shape are skipped."""
    key = (M, N, K, device, a.dtype)
    found = _tuned.get(key)
    if found is not None:
        return found
    if torch.cuda.is_current_stream_capturing():
        raise ValueError("gemm(a, b, autotune=True) times its candidates at the first call of a shape, which a "
                         "CUDA graph capture cannot hold: make one such call before capturing")
    calls, seen = {}, set()
    for name in rule.contenders(M, N, K):
        options = rule.as_run(configs.HOPPER_CANDIDATES[name], M, N, K)
        if options in seen:
            continue                        # two candidates that run as one build are timed once
        seen.add(options)
        try:
            calls[name] = _prepare(M, N, K, device, options, a.dtype)
        except ValueError:
            continue                        # this configuration cannot take the shape
    out = torch.empty_like(next(iter(calls.values())).out_like)
    with launch.on_device(device):
        stream = launch.stream_handle(device)
        fns = {name: functools.partial(_launch, call, stream=stream) for name, call in calls.items()}
        # each turn's untimed settling call is also where a contender's first call compiles
        rounds = timing.cycles(fns, [(a, b, out)], AUTOTUNE_ROUNDS, calls=AUTOTUNE_CALLS)
    if len(_tuned) >= SIGNATURES:
        _tuned.clear()
    found = _tuned[key] = calls[fastest({name: [r[name] for r in rounds] for name in calls})]
    return found


def fastest(times: dict) -> str:
    """The name whose timings (ms) have the lowest median; the first such name on a tie."""
    return min(times, key=lambda name: statistics.median(times[name]))


def _options_for(M: int, N: int, K: int, options: Options | None, overrides: dict) -> Options:
    """The caller's options with their overrides; with neither, the per-shape rule's choice (`gemm_kernels.rule`)."""
    if options is None and not overrides:
        return rule.options_for(M, N, K)
    return Options.of(options, **overrides)


def _args(cfg: Config, a_addr: int, b_addr: int, c_addr: int, work_addr: int, counter_addr: int,
          partials_addr: int, trace_addr: int, M: int, N: int, K: int, num_items: int, num_ctas: int, stream):
    """The kernel's arguments for `cfg`: 16-byte aligned global pointers (a, b and c of `cfg.dtype`), sizes,
    the grid and a stream."""
    ptr = functools.partial(launch.gmem_pointer, align=16)
    element = ELEMENT_TYPES[cfg.dtype]
    return (ptr(element, a_addr), ptr(element, b_addr), ptr(element, c_addr), ptr(cutlass.Int32, work_addr),
            ptr(cutlass.Int32, counter_addr), ptr(cutlass.Float32, partials_addr), ptr(cutlass.Int64, trace_addr),
            *(cutlass.Int32(v) for v in (M, N, K, num_items, num_ctas)), stream)


@functools.lru_cache(maxsize=None)
def _launches(cfg: Config, device: int) -> launch.LaunchCache:
    """The kernel for `cfg` on one device, compiled on first use (with that device current), behind its launch
    cache. It is shape-generic: one compile serves every M, N, K."""
    dummy = _args(cfg, 16, 16, 16, 16, 16, 16, 16, 1, ALIGN, ALIGN, 1, 1, make_fake_stream())
    with launch.on_device(device):
        compiled = cute.compile(HopperGemm(cfg), *dummy, options=f"--gpu-arch {ARCH}")
    # c is a plain pointer parameter for the register epilogue (plain STG stores): a replay re-aims it, so a new
    # output costs a replay; the staged epilogue TMA-stores through a descriptor of c, which is never rewritten
    reaimable = (2,) if cfg.epilogue == "register" else ()
    return launch.LaunchCache(compiled, device=device, pointers=7,   # a, b, c, work, counter, partials, trace
                              reaimable=reaimable)


def compile_gemm(M: int, N: int, K: int, options: Options | None = None, *, arch: str = ARCH, dump_dir=None,
                 dtype: torch.dtype = torch.bfloat16, **overrides):
    """Compile the kernel `gemm` would run for this shape and operand dtype (bf16 or fp16) on an H200, with no
    GPU: workbook.sass.Artifacts (.ptx, .cubin, .sass). The kernel itself is shape-generic; M and N pick the
    balanced plan's narrow width."""
    if arch != ARCH:
        raise ValueError(f"the Hopper GEMM compiles for {ARCH} only, not {arch!r}")
    check_shape(M, N, K)
    from workbook import gpus, sass
    cfg, _ = config_for(M, N, _options_for(M, N, K, options, overrides), gpus.H200, dtype=dtype)
    return sass.compile_for(HopperGemm(cfg), *_args(cfg, 16, 16, 16, 16, 16, 16, 16, M, N, K, 1, cfg.cluster_size,
                                                    make_fake_stream()), arch=arch, dump_dir=dump_dir)


def _operands(a, b) -> tuple[int, int, int, int]:
    """(M, N, K, device) of checked operands for c = a @ b: both of one dtype, bf16 or fp16. A pair of shapes and
    dtypes that passed once (`_checked_operands`) is only checked for what can differ between tensors of that
    signature: contiguity, the 16-byte boundary and the device."""
    if type(a) is torch.Tensor and type(b) is torch.Tensor:
        found = _signatures.get((a.shape, b.shape, a.dtype, b.dtype))
        if found is not None and a.is_contiguous() and b.is_contiguous() and not (a.data_ptr() | b.data_ptr()) & 15:
            device = a.get_device()
            if a.is_cuda and b.is_cuda and b.get_device() == device:
                return (*found, device)
    return _checked_operands(a, b)


# (a.shape, b.shape, a.dtype, b.dtype) -> (M, N, K) of operand pairs that passed every check (`_operands`)
_signatures: dict = {}


def _checked_operands(a, b) -> tuple[int, int, int, int]:
    """`_operands` by every check, each failure a ValueError that names it."""
    check_operand("a", a, DTYPES)
    check_operand("b", b, DTYPES)
    if b.dtype != a.dtype:
        raise ValueError(f"a and b must have one dtype (both bfloat16 or both float16), got {a.dtype} and "
                         f"{b.dtype}")
    device = a.get_device()
    if b.get_device() != device:
        raise ValueError(f"a and b must be on one device, got {a.device} and {b.device}")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    if len(_signatures) >= SIGNATURES:
        _signatures.clear()
    _signatures[a.shape, b.shape, a.dtype, b.dtype] = (M, N, K)
    return M, N, K, device


def gemm(a: torch.Tensor, b: torch.Tensor, options: Options | None = None, *, out: torch.Tensor | None = None,
         autotune: bool = False, **overrides) -> torch.Tensor:
    """c = a @ b on an H100/H200: a [M, K], b [K, N] (row-major, as torch lays out `a @ b`), both bf16 or both
    fp16; fp32 accumulation; c [M, N] of their dtype (written into `out`, of that dtype, if given).
    `options`: a `hopper_options.Options` (default: the per-shape rule's choice, `gemm_kernels.rule`; with
    keyword overrides alone, `Options()`), with any of its fields overridden by keyword (`tile`, `stages`,
    `epilogue`, `schedule`, `narrow_ns`, `cluster_m`, `cluster_n`, `band_rows`, `persistent`, `dynamic`,
    `defer_epilogue`, `stream_k`, `swap_ab`, ...; each is described there). `autotune=True` instead times the
    candidates the rule and the nearest measured shapes favour (`rule.contenders`) on these operands at the first
    call of each shape, dtype and device in this process, and runs the fastest from then on (a first call costs
    their compiles and ~30 calls each)."""
    if autotune and (options is not None or overrides):
        raise ValueError("autotune=True chooses the options itself: give options (or their fields) or autotune, "
                         "not both")
    M, N, K, device = _operands(a, b)
    if out is not None and not _fits_out(out, a.dtype, M, N, device):
        check_operand("out", out, DTYPES)
        if out.dtype != a.dtype:
            raise ValueError(f"out must have the operands' dtype {a.dtype}, got {out.dtype}")
        if out.shape != (M, N) or out.get_device() != device:
            raise ValueError(f"out must be [{M}, {N}] on {a.device}, got {tuple(out.shape)} on {out.device}")
    call = _tuned_call(a, b, M, N, K, device) if autotune else _call_for(M, N, K, device, options, dtype=a.dtype,
                                                                          **overrides)
    if out is None:
        # a fresh contiguous [M, N] of a's dtype on its device: empty_like of an expanded element parses no
        # size, dtype or device, ~1.4 us cheaper per call than a.new_empty((M, N)) on the H200's host
        out = torch.empty_like(call.out_like)

    # The launch goes to the current device and stream; only switch devices when `a` lives elsewhere
    # (the switch costs host time, which the per-call-synchronised benchmark would count).
    with launch.on_device(device):
        _launch(call, a, b, out, launch.stream_handle(device))
    return out


def _fits_out(out, dtype: torch.dtype, M: int, N: int, device: int) -> bool:
    """True only where a given `out` passes every check `gemm` makes of it (a contiguous [M, N] tensor of the
    operands' dtype on their device, on a 16-byte boundary), in a few attribute reads: the named checks run only
    where it is False (a plain tensor only; a subclass takes them too)."""
    return (type(out) is torch.Tensor and out.dtype is dtype and out.shape == (M, N) and out.is_contiguous()
            and not out.data_ptr() & 15 and out.get_device() == device)


def _launch(call: _Call, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, stream: int) -> None:
    """Launch `call`'s kernel on checked operands (through its launch cache: a graph replay after the first);
    swapped, the kernel's A' is our b and its B' our a."""
    if call.cfg.swap_ab:
        a, b = b, a
    key = (a.data_ptr(), b.data_ptr(), out.data_ptr()) + call.tail(stream)
    call.launches(key, lambda s: _args(call.cfg, *key, cuda_driver.CUstream(s)), stream)


def timeline(a: torch.Tensor, b: torch.Tensor, options: Options | None = None, **overrides):
    """Run `gemm(a, b, options, **overrides)` once in the build that stamps the global nanosecond timer as
    each CTA runs (`Options.trace`; a separate compile, the timed kernel carries none of it). Returns (c,
    frame): the `hopper_trace.trace_frame` of that launch, one row per segment a CTA ran, with the `width` of
    its work-list row."""
    M, N, K, device = _operands(a, b)
    call = _call_for(M, N, K, device, options, dtype=a.dtype, **{**overrides, "trace": True})
    out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    stream = launch.stream_handle(device)
    trace = call.scratch(stream)[2]
    trace.fill_(-1)                      # a stamp never written reads -1, not an old launch's value
    _launch(call, a, b, out, stream)
    torch.cuda.synchronize(device)
    frame = trace_frame(trace.cpu().numpy(), call.cfg.cluster_size)
    frame.insert(frame.columns.get_loc("row") + 1, "width", call.work[:, 2].cpu().numpy()[frame.row.to_numpy()])
    return out, frame
