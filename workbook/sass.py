"""Compile CuTe DSL kernels for a GPU you do not have, and read the machine code they become.

    art = compile_for(kernel, a, b, out, arch="sm_100a")       # any @cute.jit function; no GPU, no driver needed
    art.ptx                         # the PTX the DSL emitted (virtual ISA)
    art.sass                        # the SASS ptxas made of it (the real ISA), via nvdisasm
    histogram(art.sass)             # Counter({'LDG.E': 2, 'STG.E': 1, ...})
    histogram(art.sass, base=True)  # Counter({'LDG': 2, 'STG': 1, ...})
    instructions(art.sass)          # [Instruction(address=0, predicate=None, opcode='LDC', ...), ...]

`compile_for` accepts the same arguments as `cute.compile`: torch tensors wrapped by
`cutlass.cute.runtime.from_dlpack`, or fake tensors from `cutlass.cute.runtime.make_fake_compact_tensor`
(shapes only, no memory at all). SASS comes from `nvdisasm`, shipped on PyPI as `nvidia-cuda-nvdisasm`.

The smallest kernel to try it on is `workbook.primer.vector_add.vector_add`.
"""
from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cutlass.cute as cute

# Architectures we compile for. sm_90a: H100/H200 (wgmma, TMA). sm_100a: B200/GB200 (tcgen05, TMEM).
# sm_120a (RTX 50xx, consumer Blackwell) compiles too, but has no tcgen05: only simple kernels target it.
SUPPORTED_ARCHS = ("sm_90a", "sm_100a", "sm_120a")
NVDISASM_PACKAGE = "nvidia-cuda-nvdisasm"
# options compile_for sets itself; a caller passing them would silently fight it
_RESERVED_OPTIONS = ("--gpu-arch", "--dump-dir", "--keep-ptx", "--keep-cubin")


@dataclass(frozen=True)
class Artifacts:
    """What one compilation produced. `compiled` is the callable `cute.compile` returned (it runs on a GPU)."""

    ptx: str
    cubin: bytes
    sass: str
    arch: str
    dump_dir: Path | None  # where the .ptx/.cubin files are; None when a temporary dir was used and removed
    compiled: Any = field(repr=False)


def _check_arch(arch: str) -> None:
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"unsupported arch {arch!r}; choose one of {', '.join(SUPPORTED_ARCHS)}")


def compile_for(fn, *args, arch: str = "sm_90a", dump_dir: str | Path | None = None,
                options: str = "") -> Artifacts:
    """Compile the `@cute.jit` function `fn(*args)` for `arch` with no GPU; return its PTX, cubin and SASS.

    `dump_dir` keeps the .ptx and .cubin files there (created if missing); without it they go to a
    temporary directory that is removed before returning. `options` are extra `cute.compile` options.
    """
    _check_arch(arch)
    for reserved in _RESERVED_OPTIONS:
        if reserved in options:
            raise ValueError(f"options may not contain {reserved}: compile_for sets it (use its arguments)")
    if dump_dir is None:
        with tempfile.TemporaryDirectory(prefix="cute_dump_") as tmp:
            return _compile(fn, args, arch, Path(tmp), options, keep=False)
    dump_dir = Path(dump_dir)
    dump_dir.mkdir(parents=True, exist_ok=True)  # cute.compile requires it to exist
    return _compile(fn, args, arch, dump_dir, options, keep=True)


def _compile(fn, args, arch: str, dump_dir: Path, options: str, keep: bool) -> Artifacts:
    flags = f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {dump_dir} {options}".strip()
    compiled = cute.compile(fn, *args, options=flags)
    # the DSL reads the dumped files back into memory at compile time, so they outlive the directory
    ptx, cubin = compiled.__ptx__, compiled.__cubin__
    if not isinstance(ptx, str) or not isinstance(cubin, bytes):
        raise RuntimeError(f"cute.compile produced no PTX/cubin for {arch} in {dump_dir} "
                           f"(got {type(ptx).__name__}, {type(cubin).__name__})")
    return Artifacts(ptx=ptx, cubin=cubin, sass=disassemble(cubin), arch=arch,
                     dump_dir=dump_dir if keep else None, compiled=compiled)


def nvdisasm_path() -> Path:
    """The nvdisasm executable: from the `nvidia-cuda-nvdisasm` wheel if installed, else from PATH."""
    try:
        files = importlib.metadata.files(NVDISASM_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == "nvdisasm":
            path = Path(f.locate())
            if path.is_file():
                return path
    found = shutil.which("nvdisasm")
    if found:
        return Path(found)
    raise FileNotFoundError(f"nvdisasm not found: `pip install {NVDISASM_PACKAGE}` "
                            f"(or put a CUDA toolkit's bin/ on PATH)")


def disassemble(cubin: bytes) -> str:
    """The SASS of every function in a cubin, as `nvdisasm -c` prints it."""
    if not isinstance(cubin, (bytes, bytearray)) or not cubin:
        raise ValueError(f"cubin must be non-empty bytes; got {type(cubin).__name__} {repr(cubin):.40}")
    if bytes(cubin[:4]) != b"\x7fELF":
        raise ValueError("cubin is not an ELF image (it should start with b'\\x7fELF')")
    with tempfile.TemporaryDirectory(prefix="nvdisasm_") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        run = subprocess.run([str(nvdisasm_path()), "-c", str(path)], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"nvdisasm failed ({run.returncode}): {run.stderr.strip()}")
    # stderr only carries a format notice ("switching to Old format") on success; the text is complete
    return run.stdout


_EIATTR_REGCOUNT = 0x2F     # .nv.info attribute: registers per thread of one function
_EIFMT_SVAL = 0x04           # attribute format: a u16 size, then that many bytes


def registers(cubin: bytes) -> dict[str, int]:
    """Registers per thread that ptxas allocated to each kernel of a cubin: {kernel name: count}.

    Read from the ELF's `.nv.info` section (attribute EIATTR_REGCOUNT: symbol index, count), the number
    `cuobjdump -res-usage` prints. With T threads per CTA, registers * T (rounded per warp to 256) must fit
    the SM's 64 Ki registers once per resident CTA: that is what bounds occupancy in most tensor-core kernels.
    """
    import struct
    data = bytes(cubin)
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("cubin is not a 64-bit ELF image")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    # (name, type, flags, addr, offset, size, link, info, align, entsize)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def string(table: int, offset: int) -> str:
        start = sections[table][4] + offset
        return data[start:data.index(b"\0", start)].decode()

    symbols, counts = [], {}
    for sec in sections:
        if sec[1] == 2:                                   # SHT_SYMTAB: 24-byte entries, names in sh_link
            symbols = [string(sec[6], struct.unpack_from("<I", data, sec[4] + i)[0])
                       for i in range(0, sec[5], 24)]
        elif string(shstrndx, sec[0]) == ".nv.info":
            pos, end = sec[4], sec[4] + sec[5]
            while pos + 4 <= end:
                fmt, attr, size = data[pos], data[pos + 1], struct.unpack_from("<H", data, pos + 2)[0]
                if fmt == _EIFMT_SVAL and attr == _EIATTR_REGCOUNT:
                    symbol, count = struct.unpack_from("<II", data, pos + 4)
                    counts[symbol] = count
                pos += 4 + (size if fmt == _EIFMT_SVAL else 0)   # other formats carry a 2-byte value in place
    return {symbols[i] if i < len(symbols) else f"symbol {i}": n for i, n in counts.items()}


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction.

    `predicate` is the guard without its `@` (`"P0"`, `"!P0"`, `"!UPT"`) or None when unguarded.
    `opcode` keeps its modifiers (`"HGMMA.64x128x16.F32.BF16"`); `base` drops them (`"HGMMA"`).
    `operands` are split on top-level commas, modifiers kept (`"R4.reuse"`, `"desc[UR4][R2.64]"`).
    `function` is the kernel or device function the instruction belongs to.
    """

    address: int
    predicate: str | None
    opcode: str
    operands: tuple[str, ...]
    function: str = ""

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]

    def __str__(self) -> str:
        """The instruction as nvdisasm prints it, without address and comments: `@!P0 IMAD.WIDE R2, R9, 0x4, R2`."""
        guard = f"@{self.predicate} " if self.predicate else ""
        return f"{guard}{self.opcode} {', '.join(self.operands)}".rstrip()


# `/*0a50*/  <instruction> ;  /* 0x... encoding */` ; the address is a byte offset in the function
_ADDRESS = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/(.*)$")
# a label on its own line: `.L_x_12:` (branch target), `.text.name:` (section), `name:` (function entry)
_LABEL = re.compile(r"^\s*([.$\w]+):\s*$")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/")
_ANNOTATION = re.compile(r"\(\*.*?\*\)")  # nvdisasm notes like (*"INDIRECT_CALL"*)
_PREDICATE = re.compile(r"^@(!?\w+)\s+")


def _split_operands(text: str) -> tuple[str, ...]:
    """Split on commas outside brackets: `desc[UR4][R2.64], R9` -> ('desc[UR4][R2.64]', 'R9')."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[({":
            depth += 1
        elif ch in "])}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return tuple(p.strip() for p in parts if p.strip())


def _parse_statement(address: int, text: str, function: str) -> Instruction | None:
    text = _ANNOTATION.sub(" ", _BLOCK_COMMENT.sub(" ", text.split("//", 1)[0]))
    # `{` / `}` bracket a dual-issued pair on architectures that print them; the pair is two instructions
    text = text.replace("{", " ").replace("}", " ").split(";", 1)[0].strip()
    if not text:
        return None
    predicate = None
    m = _PREDICATE.match(text)
    if m:
        predicate, text = m.group(1), text[m.end():]
    opcode, _, rest = text.partition(" ")
    return Instruction(address, predicate, opcode, _split_operands(rest), function)


def instructions(sass: str) -> list[Instruction]:
    """Parse nvdisasm output into Instruction records, in address order within each function.

    Skips directives (`.section`, `.type`, ...), labels (`.L_x_3:`) and comments; tracks which function
    each instruction belongs to from its entry label.
    """
    out: list[Instruction] = []
    function = ""
    for line in sass.splitlines():
        m = _ADDRESS.match(line)
        if m is None:
            label = _LABEL.match(line)
            # .L_x_ labels are branch targets and .text. labels name sections; any other label opens a function
            if label and not label.group(1).startswith("."):
                function = label.group(1)
            continue
        ins = _parse_statement(int(m.group(1), 16), m.group(2), function)
        if ins is not None:
            out.append(ins)
    return out


def histogram(sass: str, base: bool = False) -> Counter:
    """How many times each opcode occurs; `base=True` drops modifiers (`IMAD.WIDE` counts as `IMAD`).

    Counts every instruction in the text, including the NOP padding at the end of each function.
    """
    return Counter(ins.base if base else ins.opcode for ins in instructions(sass))
