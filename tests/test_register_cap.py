"""workbook.gpus.register_cap against the compiler the kernels are built with: a kernel that must hold VALUES
registers at once, compiled for CTAs of several sizes with min_blocks_per_mp, fits in register_cap's registers
where it can and spills where it cannot."""
import functools

import pytest

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

from workbook import gpus, sass

VALUES = 96       # live at once across the barrier: with the addresses beside them more than 96 registers, at most 112


@cute.kernel
def _hold(src: cute.Tensor, dst: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    held = cute.make_rmem_tensor(cute.make_layout(VALUES), cutlass.Int32)
    for i in cutlass.range(VALUES, unroll_full=True):
        held[i] = src[tidx * VALUES + i]
    cute.arch.barrier()          # no load moves past it, no store before it: every value is live here
    for i in cutlass.range(VALUES, unroll_full=True):
        dst[tidx * VALUES + i] = held[i] + i


@cute.jit
def _launch(src: cute.Tensor, dst: cute.Tensor, stream: cuda.CUstream, threads: cutlass.Constexpr,
            ctas: cutlass.Constexpr):
    # the carveout, as in the kernels' launches, lets min_blocks_per_mp compile on a machine without a GPU
    _hold(src, dst).launch(grid=(1, 1, 1), block=(threads, 1, 1), stream=stream, min_blocks_per_mp=ctas,
                           preferred_smem_carveout=100)


@functools.lru_cache(maxsize=None)
def compiled(threads: int, ctas: int) -> tuple[int, bool]:
    """(registers per thread, spilled) of the kernel built for `ctas` CTAs of `threads` per SM."""
    n = cute.sym_int32()
    args = [make_fake_compact_tensor(cutlass.Int32, (n,)) for _ in range(2)]
    art = sass.compile_for(_launch, *args, make_fake_stream(), threads, ctas, arch="sm_90a")
    regs, = sass.registers(art.cubin).values()
    return regs, "STL" in art.sass


@pytest.mark.parametrize("threads,ctas,cap", [(288, 2, 96), (256, 2, 128), (384, 2, 80), (288, 1, 168),
                                              (128, 4, 128), (320, 2, 96)])
def test_register_cap_is_what_the_compiler_holds_a_kernel_to(threads, ctas, cap):
    assert gpus.register_cap(threads, ctas) == cap
    needed, spilled = compiled(32, 1)
    assert not spilled and 96 < needed <= 112, needed     # between the cap and 65536 / (2 x 288): tells them apart
    regs, spilled = compiled(threads, ctas)
    assert regs <= cap and spilled == (needed > cap), (threads, ctas, regs, spilled, needed)


def test_ctas_by_registers_inverts_the_cap():
    assert gpus.ctas_by_registers(90, 288) == 2 and gpus.ctas_by_registers(97, 288) == 1
    assert gpus.ctas_by_registers(160, 288) == 1 and gpus.ctas_by_registers(169, 288) == 0
    assert gpus.ctas_by_registers(32, 32) == 64       # the SM's 64 resident warps bind first
    for threads in (128, 288, 384):
        for regs in (24, 90, 128, 232):
            ctas = gpus.ctas_by_registers(regs, threads)
            assert ctas == 0 or gpus.register_cap(threads, ctas) >= regs
            assert gpus.register_cap(threads, ctas + 1) < regs or (ctas + 1) * -(-threads // 32) > 64
    with pytest.raises(ValueError):
        gpus.ctas_by_registers(0, 128)
