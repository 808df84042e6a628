"""Sizes past 32 bits: no global address of any kernel is built from a 32-bit product that can pass 2^31.

Compiled for sm_90a and sm_100a on the CPU, read in the PTX. For every global load, store or atomic, the backward
slice of its address register is searched for a 32-bit multiply or left shift (`mul.lo.s32`, `mad.lo.s32`,
`shl.b32`) that scales a runtime size (a value that depends on a kernel parameter) or, for kernels compiled
for one static shape, a multiple of a row length. Such a product wraps past 2^31 before `cvt.s64.s32` widens it:
the Blackwell GEMM's register epilogue computed row_tile * 128 * N that way (`shl.b32 ..., 23` at N = 65536),
so M * N >= 2^31 (32768 tokens x 128256 vocabulary) stored at negative offsets. 64-bit products
(`mul.wide.s32`, `mul.lo.s64`) are what the address must be built from.
"""
from __future__ import annotations

import functools
import re

import pytest

_INSTRUCTION = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.:]*)\s+([^;]*);")
_REGISTER = re.compile(r"%[a-z]+\d+")
_NO_DESTINATION = ("st.", "red.", "bra", "setp", "mbarrier", "cp.", "tcgen05", "wgmma", "bar.", "fence",
                   "prefetch", "ret", "trap", "elect")
_NARROW_PRODUCT = re.compile(r"(mul\.lo|mad\.lo)\.[su]32|shl\.b32")
_MEMORY_ACCESS = re.compile(r"(ld|st|atom|red)\.global")


def _instructions(ptx: str) -> list[tuple[str, str, list[str], list[str]]]:
    """(opcode, operands, destination registers, source registers) of each PTX instruction."""
    found = []
    for line in ptx.splitlines():
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        op, args = m.groups()
        regs = _REGISTER.findall(args)
        if op.startswith(_NO_DESTINATION) or not regs:
            dests, srcs = [], regs
        elif args.lstrip().startswith("{"):                  # a vector destination: {%r1, %r2, ...}
            dests = _REGISTER.findall(args[:args.index("}")])
            srcs = _REGISTER.findall(args[args.index("}"):])
        else:
            dests, srcs = regs[:1], regs[1:]
        found.append((op, args.strip(), dests, srcs))
    return found


def narrow_address_products(ptx: str, row_length: int | None = None) -> list[str]:
    """The 32-bit products in the address slices of global memory accesses that scale a runtime size, or (with
    `row_length`, for a static shape) multiply by a multiple of it."""
    ins = _instructions(ptx)
    defined_by: dict[str, list[int]] = {}
    for i, (_, _, dests, _) in enumerate(ins):
        for d in dests:
            defined_by.setdefault(d, []).append(i)
    # registers whose value depends on a kernel parameter, through arithmetic (a value loaded from memory or
    # shuffled is data, not a size): a fixpoint over the instructions
    sized = {d for op, _, dests, _ in ins if op.startswith("ld.param") for d in dests}
    changed = True
    while changed:
        changed = False
        for op, _, dests, srcs in ins:
            if op.startswith(("ld.", "atom.", "shfl.")) or not dests or set(dests) <= sized:
                continue
            if sized.intersection(srcs):
                sized.update(dests)
                changed = True
    flagged = set()
    for op, args, _, _ in ins:
        address = re.search(r"\[(%rd\d+)", args) if _MEMORY_ACCESS.match(op) else None
        if not address:
            continue
        todo, seen = [address.group(1)], set()
        while todo:
            reg = todo.pop()
            if reg in seen:
                continue
            seen.add(reg)
            for i in defined_by.get(reg, []):
                iop, iargs, _, isrcs = ins[i]
                todo += isrcs
                if not _NARROW_PRODUCT.match(iop):
                    continue
                constant = re.findall(r",\s*(-?\d+)\s*$", iargs) or re.findall(r",\s*(-?\d+)\s*,", iargs)
                factor = None
                if constant:
                    factor = 1 << int(constant[0]) if iop.startswith("shl") else abs(int(constant[0]))
                scales_row = bool(row_length and factor and factor >= row_length and factor % row_length == 0)
                if scales_row or sized.intersection(isrcs):
                    flagged.add(f"{iop} {iargs}")
    return sorted(flagged)


# ------------------------------------------------------------------ the checker can fail

_PTX = """
    ld.param.b64 	%rd1, [k_param_0];
    ld.param.b32 	%r1, [k_param_1];
    mov.u32 	%r2, %ctaid.x;
    {product}
    cvt.s64.s32 	%rd2, %r3;
    shl.b64 	%rd3, %rd2, 1;
    add.s64 	%rd4, %rd1, %rd3;
    st.global.v4.b32 	[%rd4], {{%r4, %r5, %r6, %r7}};
"""


@pytest.mark.parametrize("product, row_length, flagged", [
    ("mul.lo.s32 	%r3, %r2, %r1;", None, True),           # row * N in 32 bits, N a runtime size
    ("mad.lo.s32 	%r3, %r2, %r1, %r2;", None, True),
    ("shl.b32 	%r3, %r2, 23;", 65536, True),                 # row_tile * 128 * N, N = 65536 compiled in
    ("shl.b32 	%r3, %r2, 7;", 65536, False),                 # row_tile * 128: a row index, not an offset
    ("mul.lo.s32 	%r3, %r2, 3;", None, False),
    ("mul.wide.s32 	%rd9, %r2, %r1;\n    cvt.u32.u64 	%r3, %rd9;", None, False),
])
def test_the_checker_finds_a_32_bit_offset(product, row_length, flagged):
    found = narrow_address_products(_PTX.format(product=product), row_length)
    assert bool(found) == flagged, found


def test_a_loaded_value_is_data_not_a_size():
    ptx = _PTX.format(product="ld.global.b32 	%r8, [%rd1];\n    mul.lo.s32 	%r3, %r8, 32;")
    assert narrow_address_products(ptx) == []


# ------------------------------------------------------------------ the kernels

BIG = 65536        # M = N = 65536: M * N = 2^32 elements of c


def test_blackwell_gemm_register_epilogue_offsets_are_64_bit():
    from gemm_kernels import blackwell_host
    ptx = blackwell_host.compile_gemm(BIG, BIG, 64, epilogue="register").ptx
    assert "st.global" in ptx                        # the register epilogue's own stores are what we check
    assert narrow_address_products(ptx, row_length=BIG) == []
    # the row offset is one widening multiply by 128 * N
    assert re.search(rf"mul\.wide\.[su]32\s+%rd\d+, %r\d+, {128 * BIG};", ptx)


@pytest.mark.parametrize("epilogue", ["register", "staged"])
def test_hopper_gemm_offsets_are_64_bit(epilogue):
    from gemm_kernels import hopper_host
    ptx = hopper_host.compile_gemm(BIG, BIG, 64, epilogue=epilogue).ptx
    assert re.search(r"(ld|st|atom)\.global", ptx)
    assert narrow_address_products(ptx) == []


@functools.lru_cache(maxsize=None)
def _kmeans_variants():
    from kmeans_kernels import blackwell, hopper
    return [("sm_90a", v) for v in hopper.VARIANTS] + [("sm_100a", v) for v in blackwell.VARIANTS]


@pytest.mark.parametrize("arch, variant", _kmeans_variants())
def test_kmeans_offsets_are_64_bit(arch, variant):
    import kmeans_kernels
    ptx = kmeans_kernels.compile_assign(variant, N=BIG, D=128, K=4096, arch=arch).ptx
    assert "st.global" in ptx                        # out[row]
    assert narrow_address_products(ptx) == []
