"""Lesson 6: a pipeline of shared-memory stages between one producer warp and two consumer warpgroups.

The row sums of a matrix, out[i] = x[i, 0] + x[i, 1] + ..., streamed through shared memory: each CTA owns
128 rows and walks along them in tiles of (128, 32) fp32. One **producer warp** issues a TMA load per tile
into the next free slot of a ring of STAGES shared-memory buffers; two **consumer warpgroups** (256
threads, two per row) add up each tile and hand the slot back. Nothing else couples them, so the loads
of the next tiles overlap the adds of this one.

Each slot has two mbarriers, and `cutlass.pipeline.PipelineTmaAsync` drives them:

    producer                                   consumers
    producer_acquire(s): wait until slot s     consumer_wait(s): wait until slot s is full
      is empty, then arm its full barrier        (its TMA bytes have landed)
      with the tile's byte count
    cute.copy(..., tma_bar_ptr=full[s])        ... read the tile ...
    producer_commit(s): nothing to do (the     consumer_release(s): one thread per consumer warp
      TMA unit counts the bytes down)            arrives on the empty barrier (8 arrivals free it)

A **pipeline state** is (index, phase): the slot to use next and the parity of the barrier phase to wait
for. `advance()` moves to the next slot and flips the phase each time the index wraps around, because the
k-th use of a slot waits for the k-th completion of its barrier. Consumers start at phase 0 (wait for the
first fill); the producer starts at phase 1, so its first wait on each empty barrier passes at once.
"""
from __future__ import annotations

import functools

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import torch
from cutlass.cute.nvgpu import cpasync

from workbook import sass
from workbook.primer import _common

BLOCK_M = 128        # rows per CTA
BLOCK_K = 32         # columns per tile: 128 x 32 fp32 = 16 KiB per stage
STAGES = 4
CONSUMER_WARPS = 8   # two warpgroups
PRODUCER_WARP = 8    # warp 8 issues every TMA
THREADS = 32 * (CONSUMER_WARPS + 1)
COLS_PER_THREAD = BLOCK_K * BLOCK_M // (32 * CONSUMER_WARPS)  # 16: two threads per row


def phases(uses: int, stages: int = STAGES) -> list[tuple[int, int]]:
    """The (index, phase) a consumer waits for at each of its first `uses` steps: what advance() produces."""
    return [(k % stages, (k // stages) % 2) for k in range(uses)]


def schedule(tiles: int, stages: int = STAGES, load: float = 3.0, use: float = 1.0) -> list[dict]:
    """A schematic timeline of the ring (no GPU, no measurement): tile k goes into slot k % stages as soon
    as that slot's previous tile is released, lands `load` later, and is used for `use` once it has landed and
    the previous tile is done. Returns one dict per tile: slot, phase, issue, landed, start, end."""
    if tiles < 1 or stages < 1 or load < 0 or use <= 0:
        raise ValueError(f"need tiles >= 1, stages >= 1, load >= 0, use > 0; got {tiles}, {stages}, {load}, {use}")
    rows: list[dict] = []
    for k, (slot, phase) in enumerate(phases(tiles, stages)):
        issue = rows[k - stages]["end"] if k >= stages else 0.0   # the slot's empty barrier completes
        start = max(issue + load, rows[-1]["end"] if rows else 0.0)
        rows.append({"tile": k, "slot": slot, "phase": phase, "issue": issue, "landed": issue + load,
                     "start": start, "end": start + use})
    return rows


@cute.kernel
def row_sum_kernel(load: cute.CopyAtom, x: cute.Tensor, out: cute.Tensor, ring_layout: cute.Layout):
    tidx, _, _ = cute.arch.thread_idx()
    bm, _, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    @cute.struct
    class Shared:
        barriers: cute.struct.MemRange[cutlass.Int64, 2 * STAGES]     # a full and an empty per slot
        ring: cute.struct.Align[cute.struct.MemRange[cutlass.Float32, cute.cosize(ring_layout)], 128]

    shared = cutlass.memory.SmemAllocator().allocate(Shared)
    ring = pipeline.PipelineTmaAsync.create(
        barrier_storage=shared.barriers.data_ptr(), num_stages=STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),                  # 1 arrival + bytes
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_WARPS),  # 1 per warp
        tx_count=cute.size_in_bytes(cutlass.Float32, cute.slice_(ring_layout, (None, None, 0))))
    tiles = shared.ring.get_tensor(ring_layout)                          # (128, 32, STAGES)
    g_x = cute.local_tile(x, (BLOCK_M, BLOCK_K), (bm, None))             # (128, 32, tiles along the row)
    t_s, t_g = cpasync.tma_partition(load, 0, cute.make_layout(1), cute.group_modes(tiles, 0, 2),
                                     cute.group_modes(g_x, 0, 2))
    n_tiles = cute.size(g_x, mode=[2])

    if warp == PRODUCER_WARP:
        produce(ring, load, t_g, t_s, n_tiles)
    else:
        consume(ring, tiles, out, bm, tidx, n_tiles)


@cute.jit
def produce(ring, load, t_g, t_s, n_tiles):
    """The producer warp: one TMA per tile into the next free slot."""
    state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, STAGES)   # phase starts at 1
    for k in cutlass.range(n_tiles, unroll=1):
        ring.producer_acquire(state)             # wait: slot empty; arm: expect the tile's bytes
        cute.copy(load, t_g[(None, k)], t_s[(None, state.index)], tma_bar_ptr=ring.producer_get_barrier(state))
        ring.producer_commit(state)
        state.advance()
    ring.producer_tail(state)                    # wait until the consumers gave back every slot


@cute.jit
def consume(ring, tiles, out, bm, tidx, n_tiles):
    """The consumer warpgroups: threads 2r and 2r+1 add up row r of each tile, 16 columns each."""
    row, first = tidx // 2, (tidx % 2) * COLS_PER_THREAD
    state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, STAGES)   # phase starts at 0
    total = cutlass.Float32(0.0)
    for k in cutlass.range(n_tiles, unroll=1):
        ring.consumer_wait(state)                # wait: the tile in slot state.index has landed
        for j in cutlass.range_constexpr(COLS_PER_THREAD):
            total += tiles[row, first + j, state.index]
        ring.consumer_release(state)             # this warp is done with the slot
        state.advance()
    total += cute.arch.shuffle_sync_bfly(total, offset=1)   # add the other half of the row
    if tidx % 2 == 0 and bm * BLOCK_M + row < out.shape[0]:
        out[bm * BLOCK_M + row] = total


@cute.jit
def row_sum_host(x: cute.Tensor, out: cute.Tensor, stream):
    ring_layout = cute.make_layout((BLOCK_M, BLOCK_K, STAGES), stride=(BLOCK_K, 1, BLOCK_M * BLOCK_K))
    load, tma_x = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), x,
                                              cute.slice_(ring_layout, (None, None, 0)), (BLOCK_M, BLOCK_K))
    row_sum_kernel(load, tma_x, out, ring_layout).launch(
        grid=(cute.ceil_div(x.shape[0], BLOCK_M), 1, 1), block=(THREADS, 1, 1), stream=stream)


@functools.lru_cache(maxsize=None)
def compile(arch: str = "sm_90a") -> sass.Artifacts:
    """The row sums for fp32 [M, K] matrices, M and K runtime values (K a multiple of 4), with no GPU."""
    x = _common.fake_matrix(cutlass.Float32, cute.sym_int32(symbol="K", divisibility=4))
    return sass.compile_for(row_sum_host, x, _common.fake_vector(cutlass.Float32), _common.fake_stream(), arch=arch)


def row_sum(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x.sum(1) in fp32 on the GPU for a contiguous fp32 CUDA matrix with a multiple of 4 columns."""
    _common.require(x, "x", dtypes=(torch.float32,), ndim=2)
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device) if out is None else out
    _common.require(out, "out", dtypes=(torch.float32,), ndim=1, align=4)
    if out.shape[0] != x.shape[0]:
        raise ValueError(f"out must have {x.shape[0]} elements, got {tuple(out.shape)}")
    arch = _common.device_arch(x.device)
    cute_x = _common.runtime_tensor(x).mark_compact_shape_dynamic(mode=1, stride_order=(0, 1), divisibility=4)
    args = [cute_x, _common.runtime_tensor(out, align=4), _common.stream(x.device)]
    _common.compiled_for_device(("row_sum", arch), row_sum_host, *args, arch=arch)(*args)
    return out
