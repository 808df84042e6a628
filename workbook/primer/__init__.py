"""A CuTe DSL primer: one tiny, generic kernel per idea, each in its own module (CuTe DSL compiles only
functions whose source is in a file).

    vector_add   out = a + b, one element per thread: the whole path from Python to SASS once
    layouts      shape:stride, evaluated at trace time; a tiled kernel, out = alpha * x (local_tile, a thread partition,
                 an identity tensor for the tail, a register fragment)
    trace_time   what runs while Python traces (const_expr, range_constexpr, print) and what runs on
                 the GPU (cutlass.range, cute.printf)
    tma_copy     a tile copy with TMA: the descriptor, one issuing thread, an mbarrier's transaction count
    wgmma_tile   one 64 x N x 16 WGMMA from swizzled shared memory (sm_90a)
    tcgen05_tile the same product on Blackwell: one thread issues, the accumulator lives in tensor memory
    pipeline     a ring of shared-memory stages between one TMA producer warp and two consumer warpgroups
    draw         figures: a layout or a thread partition as a coloured grid
    exercises    checkers for the notebooks' exercises

Every lesson module has `compile(..., arch=...) -> workbook.sass.Artifacts` (no GPU needed) and a run
function that takes torch CUDA tensors and returns a torch tensor. Nothing here knows the kernel packages.
"""
