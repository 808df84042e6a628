"""What a caller can ask of the Hopper GEMM, checked once, and what follows from it: the plan and the build.

    opts = Options()                                  # the default: what `gemm_kernels.gemm(a, b)` runs
    opts = Options(schedule="uniform", cluster_m=1)   # any field by name; a bad value is a ValueError here
    opts = Options(tile=(128, 64, 64), cluster_m=1, cluster_n=2)   # a CTA pair side by side, sharing A
    plan = plan_for(4096, 4096, opts, gpus.H200)      # the work items and waves of exactly that run
    cfg, plan = config_for(4096, 4096, opts)          # the compiled kernel's parameters (Config) and the plan

`Options` is frozen and hashable: `hopper_host` caches each prepared call on (shape, device, options), and
each compiled kernel on its `Config`, so equal options share one work list and one compile. Pure Python:
planning a shape needs neither a GPU nor CuTe DSL.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

import gemm_kernels
from gemm_kernels import stages as stages_lib
from gemm_kernels import waves
from gemm_kernels.options import BackendOptions
from workbook import gpus

ARCH = "sm_90a"
WGMMA_M = 64          # rows of one warpgroup's WGMMA: each consumer warpgroup owns 64 rows of the tile
TILE_M = 128          # the tile's rows by default: two consumer warpgroups x 64 rows
TILE_MS = (64, 128)   # one consumer warpgroup (the small-M tile: M <= 512 wastes less of it) or two
TILE_K = 64           # 64 bf16 = 128 bytes: one 128-byte swizzle row of the K-major A tile
EPI_N = 32            # staged epilogue sub-tile: tile_m x 32 bf16 = 8 KiB per buffer for 128 rows
B_ATOM_N = 64         # N-major B in smem: 128-byte swizzle atoms of 64 bf16 columns
# Register epilogue: tile widths in steps of 16 columns. WGMMA's N and one lane's 16-byte store go in steps of
# 8, but on the H200 a 248-wide row's K loop took as long as a 256-wide one's while a 240-wide row took 0.95 of
# it (either the tensor cores step through N 16 columns at a time, or 16 columns = 32 bytes, one L2 sector,
# keeps neighbouring items from sharing sectors): an 8-column step only adds items.
WIDTH_STEP = 16
EPILOGUES = ("staged", "register")
SCHEDULES = ("uniform", "balanced")
ALIGN = 8             # elements: TMA wants 16-byte aligned strides
DTYPES = (torch.bfloat16, torch.float16)   # of a, b and c (one of them per call); the accumulator is fp32
DEFAULT_TILE = (TILE_M, 256, TILE_K)
STAGED_BUFFERS = 2    # staged epilogue: (tile_m x 32) sub-tile buffers, so one TMA store overlaps the next stmatrix
WGMMA_N_MAX = 256     # the widest WGMMA; a swapped tile of 288 columns issues three 96-wide ones (`wgmma_n`)
SWAPPED_WIDE = 288    # the one swapped width past WGMMA_N_MAX: 3 x 96, cuBLAS's tile at 800 x 5000 x 3000
SWAPPED_CLUSTERS = (1, 2, 4)   # swapped: CTAs along our N sharing each tile of our A (cuBLAS runs fours)


def wgmma_n(tile_n: int) -> int:
    """One WGMMA's width for a tile `tile_n` wide: the tile's own, or 96 past WGMMA_N_MAX (288 = 3 x 96, so each
    32-column sub-tile of the staged epilogue lies inside one WGMMA's columns)."""
    return tile_n if tile_n <= WGMMA_N_MAX else 96


def width_step(epilogue: str) -> int:
    """Tile widths come in steps of this many columns: the staged epilogue TMA-stores whole 32-column
    sub-tiles and takes its STAGED_BUFFERS buffers in turn, so a narrow tile must end on a whole round of
    them; the register epilogue's WGMMA and stores could go in steps of 8, but 16 is what pays (WIDTH_STEP)."""
    return EPI_N * STAGED_BUFFERS if epilogue == "staged" else WIDTH_STEP


@functools.lru_cache(maxsize=None)
def narrow_widths(tile_n: int, epilogue: str = "register") -> tuple[int, ...]:
    """Widths the balanced schedule may use beside `tile_n` with `epilogue` (the planner's g*W/(g+1) rule),
    in that epilogue's steps (`width_step`: 16 columns for the register epilogue, 64 for the staged one).
    Widest first: for 256, (240, 224, 192, 128) and (192, 128)."""
    return waves.narrow_widths(tile_n, multiple_of=width_step(epilogue))


def stage_budget(tile, epilogue: str, depth: int | None = None) -> stages_lib.StageBudget:
    """One CTA's shared memory with this tile and epilogue (`gemm_kernels.stages`); ValueError when `depth`
    stages do not fit."""
    extra = dict(epilogue_tile=(tile[0], EPI_N), epilogue_buffers=STAGED_BUFFERS) if epilogue == "staged" else {}
    return stages_lib.stages(tuple(tile), epilogue, ARCH, depth=depth, **extra)


def stage_count(tile, epilogue: str) -> int:
    """The deepest ring that fits beside `epilogue` in one CTA's shared memory (gemm_kernels.stages)."""
    return stage_budget(tile, epilogue).stages


def check_shape(M: int, N: int, K: int) -> None:
    gemm_kernels.check_sizes(M=M, N=N, K=K)
    if K % ALIGN or N % ALIGN:
        raise ValueError(f"K ({K}) and N ({N}) must be multiples of {ALIGN}: TMA needs the rows of a [M, K] "
                         f"and b [K, N] to start on 16-byte boundaries")


def check_dtype(dtype) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"the Hopper GEMM takes {' or '.join(str(d).removeprefix('torch.') for d in DTYPES)} "
                         f"operands, got {dtype}")


def check_band_rows(band_rows: int) -> None:
    if band_rows < 1:
        raise ValueError(f"band_rows must be >= 1, got {band_rows}")


@dataclass(frozen=True)
class Options(BackendOptions):
    """Every choice a Hopper GEMM call can make, each checked once, here.

    tile: (tile_m, tile_n, 64) with tile_m 128 (two consumer warpgroups of 64 rows) or 64 (one: the small-M tile,
    for skinny problems, where most rows of a 128-row tile are TMA's zero fill) and tile_n one of 64, 128, 192, 256;
    every other option works with either. stages: ring depth, None = the most that fit (`stage_count`). epilogue:
    "register" (from registers, no shared memory) or "staged" (through shared memory and a TMA store). schedule:
    "balanced" (some tiles narrower so the last wave fills the GPU) or "uniform". narrow_ns: the narrow widths the
    balanced plan may choose from, None = every one `narrow_widths(tile_n, epilogue)` lists (240, 224, 192, 128 for
    256 and the register epilogue). cluster_m: 2 pairs CTAs along M to share B tiles by TMA multicast (halves B's L2
    -> SMEM traffic). cluster_n: 2 pairs CTAs along N to share A tiles the same way: an item is then cluster_m
    tile_m x 2 tile_n, each CTA computes one tile of it, and the plan has no narrow tiles (a balanced schedule is
    then the uniform one), since a narrow item would leave one CTA of the pair a ragged share. Both 2: a 2 x 2
    cluster of four CTAs, A shared along each row and B along each column. band_rows: the L2 raster of the work list
    (`hopper_worklist.banded`), None = `band_rows_for(K)`; 1 keeps the planner's row-major order. persistent: False
    launches one CTA (pair) per work item and lets the hardware hand them out in order. dynamic: persistent CTAs
    take the next item from a global counter (False: slot i runs items i, i + slots, ...). defer_epilogue: (register
    epilogue; None = on with it) store each item's C 32 columns at a time behind the next item's first 8 K-blocks,
    not all at once between the two. stream_k: split a uniform plan's partial last wave along K over every slot
    (measured on the H200 and left off: at 4096^3 handing a partial sum over cost more than the 0.12-wave tail it
    removes). split_k: (with stream_k) where the items fit the slots at least twice, cut every item into the same
    pieces instead (`split_k_slots`), so that all pieces start at once and the tiles sharing a panel of A or B read
    each of its K-blocks together; stream-K's cut, one unit of equal length per slot, starts them at staggered
    K-blocks. short_a_box: where M is shorter than a tile (and there is no cluster), TMA loads only the power of two
    of rows that covers it (`short_a_rows`), not a whole tile_m-row box mostly of zero fill. clamp_a_box: (register
    epilogue) a CTA whose rows run past M loads the last box of rows inside M instead (`HopperGemm.a_origin`) and
    stores only its own rows of the result; None (the default) does so where M's last tile holds at most half a tile
    of rows (`clamps_a_box`), True everywhere, False nowhere. trace: the separate build that stamps the global timer
    around each row (`hopper_host.timeline`). pdl: launch as a programmatic dependent of the kernel before it in the
    stream (PDL): the CTAs start, set up their barriers and prefetch their descriptors while that kernel drains, and
    wait for it to finish (`griddepcontrol.wait`) before their first global access. Off by default: through the
    launch cache's graphs it moved no shape's time by more than 5 % either way (an H100,
    data/measured/nvidia_h100_80gb_hbm3/probes/pdl_a5c1543.csv). swap_ab: compute c^T = b^T a^T, so that our M runs
    along WGMMA's N, whose size goes in steps of 8, and our N along its 64-row M: the tile is 128 rows of our N by
    tile_n of our M, cuBLAS's plan where M is not a whole number of 128-row tiles (`gemm_kernels.hopper`, "Swapped
    operands"). It needs the staged epilogue (c is written column-major by a transposing stmatrix), 128-row tiles,
    tile_n a multiple of 32 up to 256 or 288 (three 96-wide WGMMAs), cluster_m 1, 2 or 4 (CTAs along our N sharing
    each tile of our A), cluster_n 1, and plans uniform tiles only.
    """
    tile: tuple[int, int, int] = DEFAULT_TILE
    stages: int | None = None
    epilogue: str = "register"
    schedule: str = "balanced"
    narrow_ns: tuple[int, ...] | None = None
    cluster_m: int = 2    # measured best overall on the H200
    cluster_n: int = 1
    band_rows: int | None = None
    persistent: bool = True
    dynamic: bool = True
    defer_epilogue: bool | None = None
    stream_k: bool = False
    split_k: bool = False
    short_a_box: bool = True
    clamp_a_box: bool | None = None
    trace: bool = False
    pdl: bool = False
    swap_ab: bool = False

    def __post_init__(self):
        tile = DEFAULT_TILE if self.tile is None else tuple(self.tile)
        if self.swap_ab:
            self._check_swapped(tile)
        elif (len(tile) != 3 or tile[0] not in TILE_MS or tile[2] != TILE_K or tile[1] % B_ATOM_N
                or not 64 <= tile[1] <= 256):
            raise ValueError(f"Hopper tiles are (tile_m, tile_n, {TILE_K}) with tile_m one of {TILE_MS} (one or two "
                             f"consumer warpgroups of {WGMMA_M} rows; a taller item is a CTA pair: cluster_m=2) and "
                             f"tile_n one of 64, 128, 192, 256 (whole 64-column swizzle blocks of B); got {tile}")
        object.__setattr__(self, "tile", tile)
        if self.epilogue not in EPILOGUES:
            raise ValueError(f"epilogue must be one of {EPILOGUES}, got {self.epilogue!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        clusters = SWAPPED_CLUSTERS if self.swap_ab else (1, 2)
        if self.cluster_m not in clusters:
            raise ValueError(f"cluster_m must be one of {clusters}{' (4: swapped only)' if not self.swap_ab else ''}, "
                             f"got {self.cluster_m!r}")
        if self.cluster_n not in (1, 2):
            raise ValueError(f"cluster_n must be 1 or 2, got {self.cluster_n!r}")
        if self.stages is not None:
            if self.stages < 2:
                raise ValueError(f"stages must be >= 2, got {self.stages}")
            stage_budget(tile, self.epilogue, depth=self.stages)   # ValueError when that many do not fit
        if self.narrow_ns is not None:
            if self.cluster_n > 1 or self.swap_ab:
                raise ValueError("narrow_ns: a cluster along N (cluster_n=2) and swapped operands (swap_ab) plan "
                                 "uniform tiles only")
            object.__setattr__(self, "narrow_ns", self._chosen_narrow())
        if self.band_rows is not None:
            check_band_rows(self.band_rows)
        if self.defer_epilogue and self.epilogue != "register":
            raise ValueError("defer_epilogue needs the register epilogue")
        if self.clamp_a_box and self.epilogue != "register":
            raise ValueError("clamp_a_box needs the register epilogue (the staged one stores whole boxes from m0)")
        if self.stream_k and not self.persistent:
            raise ValueError("stream_k needs persistent CTAs: a FINISH waits for units that must be running too")
        if self.split_k and not self.stream_k:
            raise ValueError("split_k cuts stream-K's work list another way: it needs stream_k=True")
        self._seal()

    __hash__ = BackendOptions.cached_hash

    def _check_swapped(self, tile) -> None:
        """What swap_ab needs (the class doc says why)."""
        if len(tile) != 3 or tile[0] != TILE_M or tile[2] != TILE_K or not (
                tile[1] % EPI_N == 0 and EPI_N <= tile[1] <= WGMMA_N_MAX or tile[1] == SWAPPED_WIDE):
            raise ValueError(f"swapped tiles are ({TILE_M}, tile_n, {TILE_K}): {TILE_M} rows of our N and tile_n of "
                             f"our M, a multiple of {EPI_N} up to {WGMMA_N_MAX}, or {SWAPPED_WIDE}; got {tile}")
        if self.epilogue != "staged":
            raise ValueError("swap_ab needs epilogue='staged': c is written column-major, by a transposing stmatrix "
                             "and a TMA store (the register epilogue stores rows of a row-major c)")
        if self.cluster_n != 1:
            raise ValueError("swap_ab clusters CTAs along our N only (cluster_m), not cluster_n")

    def _chosen_narrow(self) -> tuple[int, ...]:
        allowed = narrow_widths(self.tile_n, self.epilogue)
        chosen = tuple(sorted({int(w) for w in self.narrow_ns}, reverse=True))
        wrong = [w for w in chosen if w not in allowed]
        if wrong:
            raise ValueError(f"narrow widths {wrong} are not available for {self.tile_n}-wide tiles with the "
                             f"{self.epilogue} epilogue; choose from {allowed}")
        return chosen

    @property
    def tile_m(self) -> int:
        return self.tile[0]

    @property
    def tile_n(self) -> int:
        return self.tile[1]

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster: one work item runs on this many CTAs at once."""
        return self.cluster_m * self.cluster_n

    def k_block_load_bytes(self, element_bytes: int = 2) -> int:
        """Bytes one CTA loads from L2 per K-block: its share of the A tile its row of the cluster shares (1 /
        cluster_n) and of the B tile its column shares (1 / cluster_m); the multicast delivers the rest."""
        tile_k = self.tile[2]
        return (self.tile_m * tile_k // self.cluster_n + self.tile_n * tile_k // self.cluster_m) * element_bytes

    @property
    def ring_stages(self) -> int:
        """The ring depth this run compiles: `stages`, or the most that fit."""
        return stage_count(self.tile, self.epilogue) if self.stages is None else self.stages

    @property
    def deferred(self) -> bool:
        """None (the default) defers the register epilogue (faster at every square measured on the H200); the
        staged one is not deferred (its TMA store runs asynchronously already)."""
        return self.epilogue == "register" if self.defer_epilogue is None else self.defer_epilogue

    @property
    def narrow_choices(self) -> tuple[int, ...]:
        """The narrow widths the balanced plan may choose from, widest first (none for a cluster along N or swapped
        operands)."""
        if self.cluster_n > 1 or self.swap_ab:
            return ()
        return narrow_widths(self.tile_n, self.epilogue) if self.narrow_ns is None else self.narrow_ns


DEFAULT = Options.default()


@dataclass(frozen=True)
class Config:
    """One compiled kernel: the element type, the tile (wide width), the optional narrow width, the ring depth,
    the epilogue. Derived from checked `Options`, the operands' dtype and the plan by `config_for`; the kernel
    reads nothing else."""
    dtype: torch.dtype = torch.bfloat16   # of a, b and c: one of DTYPES (both 2 bytes: the smem arithmetic holds)
    tile_m: int = TILE_M   # one CTA's rows: WGMMA_M per consumer warpgroup
    tile_n: int = 256
    narrow_n: int | None = None
    stages: int = 4
    epilogue: str = "register"
    epi_stages: int = 2   # staged epilogue only: sub-tile buffers in flight
    cluster_m: int = 1    # 2: CTA pairs stacked along M share each B tile by TMA multicast
    cluster_n: int = 1    # 2: CTA pairs side by side along N share each A tile by TMA multicast
    dynamic: bool = True  # items handed out in list order by a global counter (False: slot i runs i, i + slots, ...)
    defer_epilogue: bool = False   # register epilogue: item j's C goes out behind item j+1's first K-blocks
    stream_k: bool = False         # the last partial wave's items are split along K over every slot
    a_rows: int | None = None      # rows of A's TMA box: None = tile_m; fewer only when M is (`short_a_rows`)
    clamp_a: bool = False          # A's box kept inside M, the result's rows mapped back (`HopperGemm.a_origin`)
    trace: bool = False            # record a timeline of every CTA's segments (`hopper_host.timeline`)
    pdl: bool = False              # a programmatic dependent launch (`Options.pdl`)
    swap_ab: bool = False          # c^T = b^T a^T: the kernel's M is our N, its N our M (`Options.swap_ab`)

    @property
    def a_box_rows(self) -> int:
        return self.tile_m if self.a_rows is None else self.a_rows

    @property
    def staged(self) -> bool:
        return self.epilogue == "staged"

    @property
    def cluster_size(self) -> int:
        return self.cluster_m * self.cluster_n

    @property
    def consumer_warpgroups(self) -> int:
        """Consumer warpgroups per CTA, each issuing WGMMA_M-row WGMMAs over its share of the tile's rows."""
        return self.tile_m // WGMMA_M

    @property
    def width_step(self) -> int:
        return width_step(self.epilogue)

    @property
    def segments(self) -> int:
        return segments(self.stream_k)


def segments(stream_k: bool) -> int:
    """Segments per work-list row (`hopper_worklist`): three with stream-K, since a unit may end one item,
    hold the next whole and start the one after (`waves.stream_k`); one otherwise."""
    return 3 if stream_k else 1


def split_k_pieces(items: int, slots: int, k_blocks: int) -> int:
    """The pieces along K that `Options.split_k` cuts each of `items` into for `slots` slots: slots // items, at
    most one per K-block; 1 (no cut) where that is under 2."""
    pieces = min(slots // items, k_blocks) if items else 0
    return pieces if pieces >= 2 else 1


def split_k_slots(options: Options, items: int, slots: int, k_blocks: int) -> int:
    """How many slots a stream-K work list is cut for (`hopper_worklist.work_rows`): with `Options.split_k`, where
    the items fit the slots twice or more, pieces x items (`split_k_pieces`), so each item is cut into the same
    runs of K-blocks and every piece starts at once; else `slots` (the stream-K cut: equal units over every slot,
    starting at staggered K-blocks, so tiles that share a panel of A or B read it at different times, each K-block
    again from DRAM unless the L2 still holds it). Measured on an H100 (probes/gemm_aligned_split_probe.py): 128 x
    128 pairs at 1024 x 1024 x K cut into halves, 64 units for 66 pair slots, took 0.79 / 0.67 / 0.45 of the same
    pairs' staggered cut's GPU time at K = 8192 / 16384 / 32768; at K = 32768 they read 151 MB from DRAM (A and B
    are 134) where the staggered cuts read 394 (2 x 2 clusters) and 627 (pairs). What it does in the rule's path:
    `rule.split_k_instead`."""
    pieces = split_k_pieces(items, slots, k_blocks) if options.split_k else 1
    return pieces * items if pieces > 1 else slots


def short_a_rows(M: int, options: Options) -> int | None:
    """Rows of A's TMA box where M is shorter than one tile and `options.short_a_box` (None: the whole tile).
    The box covers M in a power of two of at least 8 rows (one 128-byte swizzle atom; a divisor of tile_m, so
    the box is the top of each stage's A tile); the stage's other rows are never written, and the WGMMAs'
    output rows from them are past M, never stored. A CTA pair's second CTA starts at row tile_m, so a
    cluster keeps whole boxes (and a pair along N splits the box between its CTAs)."""
    rows = max(8, 1 << (M - 1).bit_length())
    fits = options.short_a_box and options.cluster_size == 1 and not options.swap_ab and rows < options.tile_m
    return rows if fits else None


def clamps_a_box(M: int, options: Options) -> bool:
    """Whether the kernel keeps A's TMA box inside M (`Options.clamp_a_box`). By default where M's last tile
    holds at most half a tile of rows: a box mostly of TMA's zero fill slowed its CTA pair's whole K loop (at
    200 x 4096 x 6144 in 64-row pairs, the kernel ran 1.45x as long as with the box kept inside M), while at a
    tile three quarters full (999 or 1500 rows of 128-row tiles) the clamped build ran 1.7 % slower
    (probes/gemm_clamp_a_07afab5.csv)."""
    if options.epilogue != "register" or options.clamp_a_box is False:
        return False
    rest = M % options.tile_m
    return bool(options.clamp_a_box) or (M > options.tile_m and 0 < rest <= options.tile_m // 2)


def plan_for(M: int, N: int, options: Options | None = None, gpu=None, **overrides) -> waves.Plan:
    """The planner's work list for exactly the run `options` describe: uniform tiles, or balanced so the last
    wave fills the GPU. An item is a cluster's tile (cluster_m x tile_m rows, cluster_n x tile_n columns) and a
    slot is a cluster: with the default CTA pairs, 66 slots on an H200. gpu: a `workbook.gpus` spec, default the
    GPU present or the H200. With swap_ab the plan is the kernel's, of the (N, M) output it computes."""
    o = Options.of(options, **overrides)
    gpu = gpu or gpus.current() or gpus.H200
    if o.swap_ab:
        M, N = N, M
    return waves.plan(M, N, gpu=gpu, tile_m=o.tile_m * o.cluster_m,
                      tile_ns=(o.tile_n * o.cluster_n, *o.narrow_choices),
                      balanced=o.schedule == "balanced", schedule="static", ctas_per_item=o.cluster_size)


ONE_WAVE_WIDEST = 128    # `one_wave`: the widest tile it changes (at 128 x 256 the staged epilogue costs a stage)


def one_wave(options: Options, M: int, N: int, gpu=None) -> Options:
    """`options` as `gemm(a, b)` runs the rule's choice: where its plan gives every cluster one work item at most
    and its tiles are at most ONE_WAVE_WIDEST columns wide, the same build with the static walk and the staged
    epilogue; elsewhere `options` themselves. With one item per cluster the global counter hands out no work
    (cluster c runs item c either way) and only adds its ticket, its queue and the last cluster's reset at exit;
    and the C of a lone item has no next item to hide the register epilogue's stores behind, where the staged
    one's TMA stores overlap its conversion. Measured on an H100 against the rule's pick
    (probes/gemm_few_items_probe.py): 0.92-0.99 of its GPU time at the 1024- to 2048-row rectangles (each change
    alone 0.95-1.01), 0.94-0.98 on 64-row tiles at 64 to 1000 rows with N = 4096 or 1000, level (0.99-1.01) at N =
    8192 and 14336. Left as they are: 128 x 256 tiles (level or slower: the staged epilogue costs a stage), 2 x 2
    clusters (not measured), a 64-row tile taller than M (1.03x slower at 32 x 6144 x 4096), and where the register
    epilogue keeps A's last box inside M (`clamps_a_box`; the staged one cannot: 1.28x slower at 200 x 4096 x 6144)."""
    o = options
    if (o.swap_ab or o.stream_k or not o.persistent or o.trace or o.narrow_ns is not None
            or (o.tile_m < TILE_M and M < o.tile_m) or o.tile_n > ONE_WAVE_WIDEST or o.cluster_size > 2
            or clamps_a_box(M, o)):
        return o
    alone = dataclasses.replace(o, dynamic=False, epilogue="staged", stages=None, defer_epilogue=None,
                                clamp_a_box=None)
    plan = plan_for(M, N, alone, gpu)
    return alone if len(plan.items) <= plan.slots else o


def config_for(M: int, N: int, options: Options | None = None, gpu=None, *, dtype: torch.dtype = torch.bfloat16,
               **overrides) -> tuple[Config, waves.Plan]:
    """(Config, Plan) for one GEMM of `dtype` operands: the compiled kernel's parameters and the work list it
    walks."""
    check_dtype(dtype)
    o = Options.of(options, **overrides)
    plan = plan_for(M, N, o, gpu)
    if o.stream_k and plan.narrow is not None:
        raise ValueError("stream_k splits uniform tiles; a balanced plan with narrow tiles fills its last wave "
                         "already")
    cfg = Config(dtype=dtype, tile_m=o.tile_m, tile_n=o.tile_n, narrow_n=plan.narrow, stages=o.ring_stages,
                 epilogue=o.epilogue, epi_stages=STAGED_BUFFERS, cluster_m=o.cluster_m,
                 cluster_n=o.cluster_n, dynamic=o.dynamic, defer_epilogue=o.deferred,
                 stream_k=o.stream_k, a_rows=short_a_rows(M, o), clamp_a=clamps_a_box(M, o),
                 trace=o.trace, pdl=o.pdl, swap_ab=o.swap_ab)
    return cfg, plan
