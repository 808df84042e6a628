"""Wave-tail balancing: choose the output tiles of a persistent GEMM so that its last wave is full.

A persistent GEMM runs ``slots`` work items at once (one per SM, or one per 2-CTA cluster) and walks a
list of output tiles. With uniform tiles the last wave is usually partial: 4096 x 4096 in 256 x 256 tiles
is 256 items on B200's 74 CTA pairs, 3.46 waves, and in the fourth wave 40 of the 74 pairs sit idle.

Balancing replaces groups of ``g`` wide tiles (``g * W`` columns of one tile row) by ``g + 1`` narrow
tiles of width ``w = g * W / (g + 1)``. Each replacement adds one item and no work (the same columns), so
``(-items) mod slots`` replacements make the item count a multiple of ``slots``. The narrow tiles are
scheduled last, so the tail waves run the shorter tiles. Which narrow width (which ``g``) pays best is
decided by simulating every allowed one and keeping the shortest predicted makespan; when none beats the
uniform tiling, the uniform tiling is the plan.

The model: a tile's run time is proportional to its width, a full-width tile takes 1.0, and nothing else
costs time. That is optimistic for narrow tiles (they reuse each loaded A tile over fewer columns), so a
predicted gain is an upper bound to be measured, not a measurement.

Two schedules (how items reach slots):

* ``"static"``: item ``i`` runs on slot ``i % slots``, in order. This is a persistent kernel whose CTAs
  stride through the item list by the grid size (CUTLASS's static persistent scheduler, our Hopper GEMM).
* ``"dynamic"``: each item goes to the slot that frees first (work stealing: Blackwell's cluster launch
  control, or an atomic tile counter).

Pure Python; no GPU needed.
"""
from __future__ import annotations

import functools
import heapq
import math
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

import torch

from gemm_kernels.stages import cta_group_for
from workbook import gpus

SCHEDULES = ("static", "dynamic")
# The planner is Python: about 10 s per million items for a balanced plan. 2^20 items of 128 x 256 are a
# 64 GiB bf16 C, more than any GEMM that fits beside its operands in a GPU's memory; a larger plan is refused.
MAX_ITEMS = 1 << 20


class Tile(NamedTuple):
    """One work item: output rows ``m0 .. m0 + tile_m`` and columns ``n0 .. n0 + width``, both clipped to
    the M x N matrix (edge tiles may hang over; they take as long as a full tile)."""
    m0: int
    n0: int
    width: int


class Run(NamedTuple):
    """One item on one slot's timeline; times in units of a full-width tile's run time."""
    item: int  # index into Plan.items
    start: float
    end: float


@dataclass(frozen=True)
class Plan:
    """The work items of one GEMM output, in schedule order, and what the model predicts for them."""
    M: int
    N: int
    tile_m: int
    wide: int  # the full tile width W; run times are in units of one M x W tile
    narrow: int | None  # the narrow tile width, None for a uniform plan
    groups: int  # re-cuts: groups of g wide tiles replaced by g + 1 narrow ones
    slots: int
    schedule: str
    gpu: str
    items: tuple[Tile, ...] = field(repr=False)  # thousands of them; describe() summarises
    makespan: float  # predicted run time of the whole GEMM: when the last slot finishes

    @functools.cached_property
    def timeline(self) -> tuple[tuple[Run, ...], ...]:
        """Per slot, the items it runs, in order, with start and end times."""
        return _timeline([t.width for t in self.items], self.wide, self.slots, self.schedule)

    @property
    def waves(self) -> float:
        """Items per slot: 3.46 means three full waves and a last one 46 % full."""
        return len(self.items) / self.slots

    @property
    def full_waves(self) -> int:
        return math.ceil(len(self.items) / self.slots)

    @property
    def last_wave_fill(self) -> float:
        """Fraction of the slots that have an item in the last wave (1.0: the last wave is full)."""
        busy = len(self.items) - (self.full_waves - 1) * self.slots
        return busy / self.slots

    @property
    def ideal(self) -> float:
        """The lower bound: all the work spread perfectly over the slots."""
        return sum(t.width for t in self.items) / self.wide / self.slots

    @property
    def efficiency(self) -> float:
        """ideal / makespan: the fraction of slot-time doing useful work under the model."""
        return self.ideal / self.makespan

    @property
    def width_counts(self) -> dict[int, int]:
        """How many items of each width, widest first."""
        return dict(sorted(Counter(t.width for t in self.items).items(), reverse=True))

    def gantt(self) -> list[list[tuple[float, float, str]]]:
        """Per slot, ``(start, duration, label)`` of each item: what ``workbook.plots.wave_occupancy`` draws."""
        return [[(r.start, r.end - r.start, f"M{self.tile_m} x N{self.items[r.item].width}") for r in runs]
                for runs in self.timeline]

    def describe(self) -> str:
        mix = " + ".join(f"{n} x M{self.tile_m}xN{w}" for w, n in self.width_counts.items())
        return (f"{self.M} x {self.N} on {self.gpu} ({self.slots} slots, {self.schedule}): {len(self.items)} items "
                f"({mix}), {self.waves:.2f} waves, last wave {self.last_wave_fill:.0%} full, "
                f"makespan {self.makespan:.3f} (ideal {self.ideal:.3f})")


def slots_for(gpu, ctas_per_item: int = 1) -> int:
    """How many work items of ``ctas_per_item`` CTAs run at once on ``gpu``, one CTA per SM (a persistent
    GEMM fills an SM's shared memory). On that GPU itself the driver is asked (a 2-CTA cluster needs both
    SMs in one GPC, so the live count can be lower than SMs / 2); elsewhere the spec says."""
    spec = gpus.get(gpu)
    _check_positive(ctas_per_item=ctas_per_item)
    live = _live_slots(spec, ctas_per_item)
    if live is not None:
        return live
    counted = _spec_slots(spec, ctas_per_item)
    if counted is None:
        known = "1-, 2- and 4-CTA" if spec.cluster_quads else "1- and 2-CTA"
        raise ValueError(f"the {spec.name} spec knows slots for {known} items, not {ctas_per_item}; "
                         f"pass slots= explicitly")
    return counted


def _spec_slots(spec, ctas_per_item: int) -> int | None:
    """The spec's count: SMs, CTA pairs, or four-CTA clusters where the driver was asked once; else None."""
    return {1: spec.sm_count, 2: spec.cluster_pairs, 4: spec.cluster_quads}.get(ctas_per_item)


def _live_slots(spec, ctas_per_item: int) -> int | None:
    here = gpus.current()
    if here is None or here.key != spec.key:
        return None
    return _asked(torch.cuda.current_device(), ctas_per_item, here)


@functools.lru_cache(maxsize=None)
def _asked(device: int, ctas_per_item: int, here) -> int | None:
    """The driver's count, asked once per device and cluster size; where it cannot say (an old driver, no CUDA
    context yet) the spec's count, with one warning: a planner that asks per shape would otherwise ask again and
    again, each time at a driver call's cost."""
    try:
        from cutlass.utils import HardwareInfo
        torch.cuda.synchronize(device)      # the driver answers only in a current context: torch makes it
        return int(HardwareInfo(device).get_max_active_clusters(ctas_per_item))
    except Exception as err:
        fallback = _spec_slots(here, ctas_per_item)
        warnings.warn(f"could not ask the driver how many {ctas_per_item}-CTA clusters fit ({err}); "
                      f"using {fallback} from the {here.name} spec", RuntimeWarning, stacklevel=4)
        return fallback


def plan(M: int, N: int, *, gpu, tile_m: int, tile_ns: Iterable[int], balanced: bool = True,
         slots: int | None = None, ctas_per_item: int | None = None, schedule: str = "static") -> Plan:
    """Plan the output tiles of an M x N GEMM result.

    gpu: a ``workbook.gpus`` spec or its name. tile_m: rows per item. tile_ns: the allowed tile widths,
    the widest first; each narrower one must be ``g * W / (g + 1)`` of the widest ``W`` for a whole ``g``
    (``narrow_widths(W)``; for W = 256: 128, 192, 224, 240, ...). slots: items that run at once, by default
    ``slots_for(gpu, ctas_per_item)``; ctas_per_item defaults to ``stages.cta_group_for(arch, tile_m)``
    (a Blackwell tile taller than 128 rows is a CTA pair). schedule: "static" or "dynamic" (module doc).

    balanced=False gives uniform ``tile_m x W`` tiles in row-major order. balanced=True gives the shortest
    predicted makespan among ``alternatives(...)``: the uniform plan unless some narrow width beats it.
    """
    if not balanced:
        spec, widths, slots = _resolve(gpu, M, N, tile_m, tile_ns, slots, ctas_per_item, schedule)
        return _plan(M, N, tile_m, widths[0], None, 0, slots, schedule, spec.name)
    return _shortest(alternatives(M, N, gpu=gpu, tile_m=tile_m, tile_ns=tile_ns, slots=slots,
                                  ctas_per_item=ctas_per_item, schedule=schedule))


def alternatives(M: int, N: int, *, gpu, tile_m: int, tile_ns: Iterable[int], slots: int | None = None,
                 ctas_per_item: int | None = None, schedule: str = "static") -> dict[int | None, Plan | None]:
    """Every plan the balancer weighs: ``None`` -> the uniform plan, then each narrow width, widest first ->
    its plan that fills the last wave with ``(-tiles) mod slots`` re-cuts, or ``None`` when the matrix has
    too few whole groups of wide tiles for that many. Only the uniform plan when its last wave is full.
    Arguments as for ``plan``."""
    spec, widths, slots = _resolve(gpu, M, N, tile_m, tile_ns, slots, ctas_per_item, schedule)
    wide = widths[0]
    uniform = _plan(M, N, tile_m, wide, None, 0, slots, schedule, spec.name)
    options: dict[int | None, Plan | None] = {None: uniform}
    recuts = (-len(uniform.items)) % slots  # each re-cut adds one item
    if recuts == 0:
        return options
    rows = math.ceil(M / tile_m)
    for narrow in sorted(widths[1:], reverse=True):
        groups_available = rows * ((N // wide) // _group_size(wide, narrow))
        options[narrow] = (_plan(M, N, tile_m, wide, narrow, recuts, slots, schedule, spec.name)
                           if recuts <= groups_available else None)
    return options


def _shortest(options: dict[int | None, Plan | None]) -> Plan:
    # min() keeps the first of equals: uniform before any re-cut, a wider narrow tile before a narrower one
    return min((p for p in options.values() if p is not None), key=lambda p: p.makespan)


def _resolve(gpu, M, N, tile_m, tile_ns, slots, ctas_per_item, schedule):
    """Check the arguments of plan(); return (spec, widths, slots)."""
    spec = gpus.get(gpu)
    _check_positive(M=M, N=N, tile_m=tile_m)
    widths = _check_widths(tile_ns)
    tiles = math.ceil(M / tile_m) * math.ceil(N / widths[0])
    if tiles > MAX_ITEMS:
        raise ValueError(f"{M} x {N} in {tile_m} x {widths[0]} tiles is {tiles:,} work items; the planner takes at "
                         f"most {MAX_ITEMS:,} (waves.MAX_ITEMS)")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")
    if slots is None:
        slots = slots_for(spec, cta_group_for(spec.arch, tile_m) if ctas_per_item is None else ctas_per_item)
    _check_positive(slots=slots)
    return spec, widths, slots


def _plan(M, N, tile_m, wide, narrow, groups, slots, schedule, gpu_name) -> Plan:
    items = _tiles(M, N, tile_m, wide, narrow, groups)
    return Plan(M=M, N=N, tile_m=tile_m, wide=wide, narrow=narrow if groups else None, groups=groups,
                slots=slots, schedule=schedule, gpu=gpu_name, items=items,
                makespan=_finish([t.width for t in items], slots, schedule) / wide)


def _tiles(M, N, tile_m, wide, narrow, groups) -> tuple[Tile, ...]:
    """Row-major wide tiles, then the narrow ones. The replaced groups sit at the left of the bottom tile
    rows, ``(N // wide) // g`` groups per row, filled from the last row upward."""
    rows = math.ceil(M / tile_m)
    span = [0] * rows  # columns of each tile row that are cut into narrow tiles
    if groups:
        g = _group_size(wide, narrow)
        per_row = (N // wide) // g
        left = groups
        for r in reversed(range(rows)):
            take = min(per_row, left)
            span[r] = take * g * wide
            left -= take
        assert left == 0, "plan() checks that the groups fit"
    tile = functools.partial(tuple.__new__, Tile)  # Tile((m0, n0, w)) without NamedTuple's slower __new__
    wide_tiles, narrow_tiles = [], []
    for r in range(rows):
        m0 = r * tile_m
        if span[r]:
            narrow_tiles += [tile((m0, n0, narrow)) for n0 in range(0, span[r], narrow)]
        wide_tiles += [tile((m0, n0, wide)) for n0 in range(span[r], N, wide)]
    return tuple(wide_tiles + narrow_tiles)


def _finish(widths: list[int], slots: int, schedule: str) -> int:
    """When the last slot finishes, in columns: the same simulation as _timeline without recording it."""
    if schedule == "static":
        return max(sum(widths[s::slots]) for s in range(slots))
    free = [0] * slots  # a heap of the times the slots free up; which slot it is does not change the end
    for w in widths:
        heapq.heapreplace(free, free[0] + w)
    return max(free)


def _timeline(widths: list[int], wide: int, slots: int, schedule: str) -> tuple[tuple[Run, ...], ...]:
    """Simulate the schedule. Times are summed in whole columns (exact integers, so the dynamic schedule's
    ties are decided by slot index, never by rounding) and reported in units of a wide tile."""
    runs: list[list[Run]] = [[] for _ in range(slots)]
    free = [0] * slots  # column-time at which each slot is next free
    if schedule == "static":
        for i, w in enumerate(widths):
            s = i % slots
            runs[s].append(Run(i, free[s] / wide, (free[s] + w) / wide))
            free[s] += w
    else:
        heap = [(0, s) for s in range(slots)]
        for i, w in enumerate(widths):
            t, s = heapq.heappop(heap)
            runs[s].append(Run(i, t / wide, (t + w) / wide))
            heapq.heappush(heap, (t + w, s))
    return tuple(tuple(r) for r in runs)


def narrow_widths(wide: int, *, multiple_of: int = 1) -> tuple[int, ...]:
    """Every width ``g * wide / (g + 1)`` (whole g) that is a multiple of ``multiple_of``, widest first: the
    widths into which whole groups of ``wide`` tiles can be re-cut."""
    _check_positive(wide=wide, multiple_of=multiple_of)
    widths = {wide * g // (g + 1) for g in range(1, wide) if wide * g % (g + 1) == 0}
    return tuple(sorted((w for w in widths if w % multiple_of == 0), reverse=True))


SHORT_UNIT = 12   # K-blocks: a stream-K unit shorter than this takes the full wave before it in (`stream_k`)


class Segment(NamedTuple):
    """K-blocks ``k0 .. k1`` of item ``item`` (an index into the work list): one piece of a stream-K unit."""
    item: int
    k0: int
    k1: int


def stream_k(items: int, slots: int, k_blocks: int) -> tuple[int, tuple[tuple[Segment, ...], ...]]:
    """Split the last, partial wave of ``items`` equal items (``k_blocks`` K-blocks each), with the full wave
    before it, over all ``slots``.

    With ``tail = items % slots`` items in the last wave, the stream-K region is the tail and, where the tail
    alone would give units shorter than SHORT_UNIT K-blocks and there is one, the full wave before it
    (``tail + slots`` items); the ``full`` items before that stay whole (data-parallel). The region's
    K-blocks, laid end to end, are cut into ``min(slots, region * k_blocks)`` units of equal work (to one
    K-block): unit ``u`` is K-blocks ``u * T // n .. (u + 1) * T // n``. Taking the full wave in makes every
    unit at least an item long, so an item is cut into two pieces, not ``slots / tail`` of them (a small tail
    cut over all slots left one CTA adding a dozen partial sums while the others waited). A unit is shorter
    than two items, so it touches at most three: the end of one, one whole, the start of the next. Returns
    ``(full, units)``; each unit is its Segments in K order.

    Where a unit starts mid-item it writes a partial sum for another slot to add: the slot holding the
    item's first K-block (that segment always ends its own unit, so it runs last) waits for the others'
    partials, adds them, and writes C. The model: the tail takes ``tail / slots`` of an item instead of a
    whole one.
    """
    _check_positive(items=items, slots=slots, k_blocks=k_blocks)
    tail = items % slots
    if tail == 0:
        return items, ()
    # the full wave joins only where the tail alone would leave units shorter than SHORT_UNIT K-blocks: there
    # the partial sums cost more than the units' K loops (probes/gemm_stream_k_region_*.csv); elsewhere the
    # wider region measured up to 1.2x slower with single-CTA items
    joins = items - tail >= slots and tail * k_blocks < SHORT_UNIT * slots
    full = items - tail - slots if joins else items - tail
    return full, stream_k_units(full, items - full, slots, k_blocks)


def stream_k_units(first: int, region: int, slots: int, k_blocks: int) -> tuple[tuple[Segment, ...], ...]:
    """Items ``first .. first + region`` (``k_blocks`` K-blocks each), laid end to end, cut into
    ``min(slots, region * k_blocks)`` units of equal work to one K-block; each unit is its Segments in K order
    (`stream_k` chooses the region)."""
    total = region * k_blocks
    if total == 0:
        return ()
    count = min(slots, total)
    bounds = [u * total // count for u in range(count + 1)]
    units = []
    for lo, hi in zip(bounds, bounds[1:]):
        pieces = []
        while lo < hi:
            item, k0 = divmod(lo, k_blocks)
            k1 = min(k_blocks, k0 + hi - lo)
            pieces.append(Segment(first + item, k0, k1))
            lo += k1 - k0
        units.append(tuple(pieces))
    return tuple(units)


def _group_size(wide: int, narrow: int) -> int:
    return narrow // (wide - narrow)


def _check_positive(**values) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int; got {v!r}")


def _check_widths(tile_ns) -> tuple[int, ...]:
    widths = tuple(tile_ns) if not isinstance(tile_ns, int) else (tile_ns,)
    if not widths:
        raise ValueError("tile_ns must name at least one tile width")
    for w in widths:
        _check_positive(tile_n=w)
    wide = widths[0]
    if len(set(widths)) != len(widths) or any(w >= wide for w in widths[1:]):
        raise ValueError(f"tile_ns must be distinct with the widest first; got {widths}")
    for w in widths[1:]:
        if w % (wide - w):
            raise ValueError(f"narrow width {w} is not g * {wide} / (g + 1) for a whole g, so whole groups of "
                             f"N{wide} tiles cannot be re-cut into it; widths that can: {narrow_widths(wide)}")
    return widths


# ---------------------------------------------------------------------------------------------------------
# Sweeps: where does balancing pay?

class Shape(NamedTuple):
    """A GEMM C[M, N] = A[M, K] @ B[K, N]. K does not change the plan (every tile's time scales with it)."""
    M: int
    N: int
    K: int
    label: str = ""


SQUARE_SHAPES = tuple(Shape(s, s, s, f"{s}^3") for s in (1024, 2048, 3072, 4096, 5120, 6144, 8192, 12288, 16384))

# Linear layers of two public decoder models (N = out features, K = in features), at a few token counts M.
LLM_LAYERS = {
    "llama3-8b qkv": (6144, 4096), "llama3-8b o": (4096, 4096),
    "llama3-8b gate+up": (28672, 4096), "llama3-8b down": (4096, 14336),
    "llama3-70b qkv": (10240, 8192), "llama3-70b o": (8192, 8192),
    "llama3-70b gate+up": (57344, 8192), "llama3-70b down": (8192, 28672),
}
LLM_SHAPES = tuple(Shape(m, n, k, f"{name} @ {m} tokens")
                   for m in (2048, 4096, 8192, 16384) for name, (n, k) in LLM_LAYERS.items())


def sweep(gpu, *, tile_m: int, tile_ns: Iterable[int], shapes: Iterable = SQUARE_SHAPES + LLM_SHAPES,
          slots: int | None = None, ctas_per_item: int | None = None, schedule: str = "static"):
    """One row per shape: the uniform and the balanced plan side by side, and the predicted gain
    (uniform makespan / balanced makespan - 1). Shapes are ``Shape``s or ``(M, N, K)`` tuples."""
    import pandas as pd

    rows = []
    tile_ns = tuple(tile_ns)
    for shape in shapes:
        shape = Shape(*shape)
        options = alternatives(shape.M, shape.N, gpu=gpu, tile_m=tile_m, tile_ns=tile_ns, slots=slots,
                               ctas_per_item=ctas_per_item, schedule=schedule)
        uniform, balanced = options[None], _shortest(options)
        rows.append(dict(
            shape=shape.label or f"{shape.M}x{shape.N}x{shape.K}", M=shape.M, N=shape.N, K=shape.K,
            slots=uniform.slots, tiles=len(uniform.items), waves=round(uniform.waves, 2),
            last_wave_fill=round(uniform.last_wave_fill, 3), narrow=balanced.narrow, groups=balanced.groups,
            items=len(balanced.items), makespan_uniform=uniform.makespan, makespan_balanced=balanced.makespan,
            ideal=round(uniform.ideal, 3), gain=uniform.makespan / balanced.makespan - 1))
    table = pd.DataFrame(rows)
    if not table.empty:
        table["narrow"] = table["narrow"].astype("Int64")  # a blank, not NaN, where the plan stays uniform
    return table


def candidates(gpu, *, tile_m: int, tile_ns: Iterable[int], shapes: Iterable = SQUARE_SHAPES + LLM_SHAPES,
               min_gain: float = 0.05, **kw):
    """The shapes where balancing should pay on ``gpu``: predicted gain >= ``min_gain``, best first."""
    if isinstance(min_gain, bool) or not isinstance(min_gain, (int, float)) or not math.isfinite(min_gain):
        raise ValueError(f"min_gain must be a finite number (0.05 = 5 %); got {min_gain!r}")
    table = sweep(gpu, tile_m=tile_m, tile_ns=tile_ns, shapes=shapes, **kw)
    return table[table.gain >= min_gain].sort_values("gain", ascending=False).reset_index(drop=True)
