"""What a compiled GEMM says about itself: the SASS and PTX facts the step notebooks and tests check.

    facts(art)                    # {"HGMMA": ..., "UTMASTG": ..., "STG.E.128": ..., "smem KiB": ..., ...}
    table({"step 1": art1, "step 2": art2})       # one row per build, the facts as columns
    launch_smem_bytes(art)        # the dynamic shared memory the host code launches the kernel with
    blackwell_epilogue(art)       # tcgen05.ld shapes, LDTM, SHFL.BFLY, STG.E.128 of an sm_100a build
    SEED_EPILOGUE                 # seed 004's description of its B200 epilogue, as data
    fragment_16x256b(lane, reg)   # (row, column) a tcgen05.ld.16x256b register holds (PTX ISA)

The Blackwell side of steps 2-3. Seed 004's B200 epilogue loads the accumulator from tensor memory with
`tcgen05.ld.16x256b.x8`, shuffles with `shfl.sync.bfly` (xor 1, xor 2) and stores `st.global.v4.b32`. In the
16x256b shape, register r of lane l holds row l/4 (+8 for r = 2, 3 of each group of four) and columns
2 (l % 4) + (r % 2) of 8-column group r / 4 (`fragment_16x256b`): per 8-column group, lane q of a quad holds
a bf16 pair in each of two rows, exactly what a Hopper WGMMA leaves in registers. So the seed's two
butterfly shuffles are step 2's quad transpose. Our Blackwell GEMM (gemm_kernels.blackwell) loads with
`tcgen05.ld.32x32b` instead, one TMEM lane (one row of c) per thread and 32 consecutive columns per load,
so it needs no shuffle at all; `blackwell_epilogue` reads which shape a build uses from its PTX.
"""
from __future__ import annotations

import re
from collections import Counter

from workbook import sass

KIB = 1024
# seed 004 (/work/shared/seeds/004_*.txt, section 1): the register-direct epilogue of its B200 kernel
SEED_EPILOGUE = {"tcgen05.ld": "16x256b.x8", "shuffle": "shfl.sync.bfly (xor 1, xor 2)",
                 "store": "st.global.v4.b32 (U32x4)", "smem_out": "64 KiB -> 0", "stages": "4 -> 7"}


def _count(hist: Counter, *prefixes: str) -> int:
    return sum(n for op, n in hist.items() if op.startswith(prefixes))


def launch_smem_bytes(art) -> int:
    """The dynamic shared memory (bytes) the compiled host code launches the kernel with.

    The DSL sizes it from the kernel's shared-memory struct and stores it, as a constant, into the launch
    configuration: the one i64 constant in [48 KiB, 227 KiB] that the host IR stores to memory."""
    ir = str(art.compiled.ir_module)
    found = {int(v) for name, v in re.findall(r"(%\d+) = llvm\.mlir\.constant\((\d+) : i64\) : i64", ir)
             if 48 * KIB <= int(v) <= 227 * KIB and re.search(rf"llvm\.store {name}, ", ir)}
    if len(found) != 1:
        raise ValueError(f"expected one launch shared-memory constant in the host IR, found {sorted(found)}")
    return found.pop()


def facts(art) -> dict:
    """The facts of one build: MMA shapes and counts, how operands arrive and c leaves, shuffles, barriers,
    WGMMA waits, spills, mbarriers (two per ring stage), registers per thread and launch shared memory."""
    hist = sass.histogram(art.sass)
    mma = sorted({op for op in hist if op.startswith(("HGMMA", "UTCHMMA", "UTCQMMA"))})
    regs = sass.registers(art.cubin)
    return {
        "MMA": ", ".join(op.split(".")[1] if op.startswith("HGMMA") else op for op in mma),
        "HGMMA": _count(hist, "HGMMA"),
        "UTMALDG": _count(hist, "UTMALDG"),
        "STSM": _count(hist, "STSM"),
        "UTMASTG": _count(hist, "UTMASTG"),
        "STG.E.128": hist["STG.E.128"],
        "other STG": _count(hist, "STG") - hist["STG.E.128"],
        "SHFL.BFLY": hist["SHFL.BFLY"],
        "LDTM": _count(hist, "LDTM"),
        "BAR.SYNC": _count(hist, "BAR.SYNC"),
        "WARPGROUP.DEPBAR": _count(hist, "WARPGROUP.DEPBAR"),
        "spills (LDL+STL)": _count(hist, "LDL", "STL"),
        "mbarriers": art.ptx.count("mbarrier.init.shared"),
        "registers": max(regs.values()) if regs else 0,
        "smem KiB": launch_smem_bytes(art) / KIB,
    }


def table(builds: dict):
    """{name: Artifacts} -> a DataFrame, one row of `facts` per build."""
    import pandas as pd
    return pd.DataFrame({name: facts(art) for name, art in builds.items()}).T


def blackwell_epilogue(art) -> dict:
    """How an sm_100a GEMM build's epilogue moves the accumulator: the tcgen05.ld shapes in its PTX, the
    SASS it became (LDTM), butterfly shuffles (PTX and SASS), and its 16-byte global stores."""
    hist = sass.histogram(art.sass)
    return {
        "tcgen05.ld (PTX)": ", ".join(sorted(set(re.findall(r"tcgen05\.ld\.sync\.aligned\.(\S+?)\.b32", art.ptx)))),
        "LDTM (SASS)": ", ".join(sorted(op for op in hist if op.startswith("LDTM"))),
        "shfl.sync.bfly (PTX)": len(re.findall(r"shfl\.sync\.bfly", art.ptx)),
        "SHFL.BFLY (SASS)": hist["SHFL.BFLY"],
        "st.global.v4 (PTX)": len(re.findall(r"st\.global(?:\.\w+)*\.v4\.b32", art.ptx)),
        "STG.E.128 (SASS)": hist["STG.E.128"],
        "STSM / STS.128 (SASS)": _count(hist, "STSM") + hist["STS.128"],
        "UTMASTG (SASS)": _count(hist, "UTMASTG"),
    }


def fragment_16x256b(lane: int, reg: int) -> tuple[int, int]:
    """(row, column) of the 32-bit value that register `reg` of `lane` holds after `tcgen05.ld.16x256b`
    (PTX ISA, tcgen05 matrix fragments; .xN repeats the 16 x 8 block N times along the columns)."""
    if not (0 <= lane < 32 and reg >= 0):
        raise ValueError(f"lane must be in [0, 32) and reg >= 0; got {lane}, {reg}")
    return lane // 4 + 8 * ((reg // 2) % 2), 2 * (lane % 4) + reg % 2 + 8 * (reg // 4)


def wgmma_fragment(lane: int, value: int) -> tuple[int, int]:
    """(row, column) within its warp's 16-row slice of accumulator value `value` = (pair p, row half h, group g)
    flattened as p + 2 h + 4 g: what a Hopper WGMMA (m64nNk16, fp32) leaves in a thread's registers."""
    if not (0 <= lane < 32 and value >= 0):
        raise ValueError(f"lane must be in [0, 32) and value >= 0; got {lane}, {value}")
    p, h, g = value % 2, (value // 2) % 2, value // 4
    return lane // 4 + 8 * h, 8 * g + 2 * (lane % 4) + p
