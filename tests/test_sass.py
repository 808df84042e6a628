"""workbook.sass: compiling for a GPU we do not have, disassembling, and reading SASS text."""
import functools
import random
import re
from collections import Counter

import pytest
import torch

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack, make_fake_compact_tensor

from workbook import sass
from workbook.primer.vector_add import vector_add

# a fresh length per session; the assertions that depend on it print it when they fail
LENGTH = random.randint(1, 5000)


@functools.lru_cache(maxsize=None)
def compiled(arch: str, fake: bool = False) -> sass.Artifacts:
    """vector_add for float32, compiled once per (arch, kind of argument) for the whole session."""
    if fake:
        n = cute.sym_int32()
        args = [make_fake_compact_tensor(cutlass.Float32, (n,)) for _ in range(3)]
    else:
        args = [from_dlpack(torch.randn(LENGTH)) for _ in range(3)]
    return sass.compile_for(vector_add, *args, arch=arch)


def _instruction_lines(text: str) -> list[str]:
    """Independent of the parser: every line that starts with an /*address*/ is one instruction."""
    return [line for line in text.splitlines() if re.match(r"\s*/\*[0-9a-f]{4,}\*/", line)]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("fake", [False, True], ids=["from_dlpack", "fake_tensor"])
def test_vector_add_compiles_to_loads_adds_and_stores(arch, fake):
    art = compiled(arch, fake)
    assert art.arch == arch and art.dump_dir is None
    assert re.search(rf"^\.target\s+{arch}\s*$", art.ptx, re.M), f"LENGTH={LENGTH}"
    assert art.cubin[:4] == b"\x7fELF"
    hist = sass.histogram(art.sass, base=True)
    # one thread: two loads (a[i], b[i]), one float add, one store, and an EXIT
    assert hist["LDG"] == 2 and hist["STG"] == 1 and hist["FADD"] == 1, (LENGTH, hist)
    assert hist["EXIT"] >= 1
    # the parser finds exactly the lines that carry an address, no more, no fewer
    assert sum(hist.values()) == len(_instruction_lines(art.sass))


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_registers_names_the_kernel_and_covers_every_register_it_uses(arch):
    art = compiled(arch)
    (name, count), = sass.registers(art.cubin).items()
    assert "vector_add" in name and name in art.sass
    used = {int(r) for r in re.findall(r"\bR(\d+)\b", art.sass)}
    # the allocation covers the highest register the code names (plus ABI-reserved ones), and is small here
    assert max(used) < count <= 32, (count, sorted(used))
    with pytest.raises(ValueError, match="ELF"):
        sass.registers(b"not a cubin")


def test_static_length_is_baked_into_the_bounds_check():
    """from_dlpack gives a static shape: the `i < n` test compares against a constant (n - 1 or n)."""
    ins = [i for i in sass.instructions(compiled("sm_90a").sass) if i.base == "ISETP"]
    constants = {hex(LENGTH - 1), hex(LENGTH)} | ({"RZ"} if LENGTH == 1 else set())  # RZ: the zero register
    assert any(constants & set(i.operands) for i in ins), (LENGTH, ins)


def test_sm_120a_compiles_simple_kernels():
    art = sass.compile_for(vector_add, *[from_dlpack(torch.zeros(64)) for _ in range(3)], arch="sm_120a")
    assert ".target sm_120a" in art.ptx and sass.histogram(art.sass, base=True)["STG"] == 1


def test_dump_dir_keeps_the_files(tmp_path):
    target = tmp_path / "new" / "dir"  # created by compile_for
    art = sass.compile_for(vector_add, *[from_dlpack(torch.zeros(32)) for _ in range(3)],
                           arch="sm_100a", dump_dir=target)
    assert art.dump_dir == target
    (ptx,) = target.glob("*.sm_100a.ptx")
    (cubin,) = target.glob("*.sm_100a.cubin")
    assert ptx.read_text() == art.ptx and cubin.read_bytes() == art.cubin


@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "sm_100", "", "hopper"])
def test_unsupported_arch_is_named_with_the_choices(arch):
    with pytest.raises(ValueError, match=r"sm_90a, sm_100a, sm_120a"):
        sass.compile_for(vector_add, arch=arch)


@pytest.mark.parametrize("option", ["--gpu-arch sm_80", "--dump-dir /tmp", "--keep-ptx"])
def test_reserved_options_are_refused(option):
    with pytest.raises(ValueError, match=option.split()[0]):
        sass.compile_for(vector_add, arch="sm_90a", options=option)


def test_disassemble_refuses_what_is_not_a_cubin():
    with pytest.raises(ValueError, match="non-empty"):
        sass.disassemble(b"")
    with pytest.raises(ValueError, match="ELF"):
        sass.disassemble(b"PK\x03\x04 not a cubin")


def test_missing_nvdisasm_names_the_package(monkeypatch):
    monkeypatch.setattr(sass.importlib.metadata, "files", lambda name: [])
    monkeypatch.setattr(sass.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="nvidia-cuda-nvdisasm"):
        sass.nvdisasm_path()


# A hand-written listing with every construct the parser must survive: directives, a function entry label,
# a section label, branch-target labels, predicates (negated, uniform, true), hex-encoding comments, a line
# comment, an nvdisasm annotation, a dual-issued pair in braces, and a second (device) function.
LISTING = r"""
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
//--------------------- .text.kern --------------------------
	.section	.text.kern,"ax",@progbits
        .type           kern,@function
kern:
.text.kern:
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                          /* 0x000fe20000000800 */
        /*0010*/         {         S2R R0, SR_TID.X ;                     /* 0x0000000000007919 */
        /*0020*/                   S2R R2, SR_CTAID.X ;        }
.L_x_0:
        /*0030*/              @!P0 IMAD.WIDE R2, R9.reuse, 0x4, R2 ;   // a line comment
        /*0040*/               @P1 LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0050*/             @!UPT HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24, gsb0 ;
        /*0060*/                   HGMMA.64x128x16.F32.BF16 R88, gdesc[UR8], RZ, !UPT ;
        /*0070*/                   BRX R2 -0x110 (*"INDIRECT_CALL"*) ;
        /*0080*/               @PT BRA `(.L_x_0) ;
        /*0090*/                   EXIT ;
.L_x_1:
        /*00a0*/                   NOP;
        .type           $__internal_0_$helper,@function
$__internal_0_$helper:
        /*00b0*/                   FADD R0, -R1, |R2| ;
        /*00c0*/                   RET.REL.NODEC R20 `(kern) ;
.L_x_2:
//--------------------- SYMBOLS --------------------------
	.type		.nv.reservedSmem.offset0,@object
"""


def test_instructions_parse_every_construct():
    ins = sass.instructions(LISTING)
    assert [i.address for i in ins] == list(range(0, 0xd0, 0x10))
    assert [i.predicate for i in ins] == [None, None, None, "!P0", "P1", "!UPT", None, None, "PT",
                                         None, None, None, None]
    assert ins[1].opcode == "S2R" and ins[1].operands == ("R0", "SR_TID.X")  # the brace is not an operand
    assert ins[2].operands == ("R2", "SR_CTAID.X")
    assert ins[3].operands == ("R2", "R9.reuse", "0x4", "R2")  # the // comment is gone
    assert ins[4].opcode == "LDG.E.128" and ins[4].operands == ("R4", "desc[UR4][R2.64]")
    assert ins[5].base == "HGMMA" and ins[5].operands == ("R24", "gdesc[UR8]", "R24", "gsb0")
    assert ins[7].opcode == "BRX" and ins[7].operands == ("R2 -0x110",)  # the annotation is dropped
    assert ins[8].operands == ("`(.L_x_0)",)
    assert ins[11].operands == ("R0", "-R1", "|R2|")
    assert str(ins[3]) == "@!P0 IMAD.WIDE R2, R9.reuse, 0x4, R2" and str(ins[9]) == "EXIT"
    assert {i.function for i in ins[:10]} == {"kern"}
    assert {i.function for i in ins[11:]} == {"$__internal_0_$helper"}


def test_histogram_matches_a_hand_count():
    assert sass.histogram(LISTING) == Counter({
        "LDC": 1, "S2R": 2, "IMAD.WIDE": 1, "LDG.E.128": 1, "HGMMA.64x128x16.F32.BF16": 2, "BRX": 1,
        "BRA": 1, "EXIT": 1, "NOP": 1, "FADD": 1, "RET.REL.NODEC": 1})
    assert sass.histogram(LISTING, base=True) == Counter({
        "LDC": 1, "S2R": 2, "IMAD": 1, "LDG": 1, "HGMMA": 2, "BRX": 1, "BRA": 1, "EXIT": 1, "NOP": 1,
        "FADD": 1, "RET": 1})


def test_no_instructions_in_text_without_code():
    assert sass.instructions("") == [] and sass.histogram(".section .nv.info\n// nothing\n") == Counter()


def _gpu_arch() -> str | None:
    if not torch.cuda.is_available():
        return None
    return {(9, 0): "sm_90a", (10, 0): "sm_100a", (12, 0): "sm_120a"}.get(torch.cuda.get_device_capability())


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_arch() is None, reason="needs a CUDA GPU of arch sm_90a, sm_100a or sm_120a")
def test_compiled_callable_runs_on_the_gpu():
    n = random.randint(1, 100_000)
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    args = [from_dlpack(t) for t in (a, b, out)]
    art = sass.compile_for(vector_add, *args, arch=_gpu_arch())
    art.compiled(*args)
    torch.cuda.synchronize()
    assert torch.equal(out, a + b), f"n={n}"
