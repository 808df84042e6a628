"""Probe: what a launch with at most one work item per cluster pays for the dynamic schedule and the register
epilogue.

The traces of `gemm_fixed_costs_trace_probe.py` (an H100, 1024 x 2048 x K, one 128 x 128 tile per SM) read the K loop
at cuBLAS's pace and put the rest of our launch in its fixed costs: the dynamic schedule's counter (a ticket
claimed after the last loads, the queue's tail and the last cluster's reset at exit), which buys nothing where every
cluster has one item at most, and the epilogue (the deferred register epilogue's stores run after the K loop when
there is no next item to hide them behind; the staged one TMA-stores). Here, at the rule check's 1024- to
2048-row rectangles and controls, the rule's pick against the same build with the static walk (`dynamic=False`),
with the staged epilogue, and with both, taking turns, answers exact on small integers first
(`probe_rows.gemm_rows`).

The second round (`rule`): `hopper_options.one_wave`, which `gemm(a, b)` now runs (both changes where each cluster
has one item and the tile is at most 128 wide), against the candidate the rule picks, at every shape of the rule
check where it changes the build (17 of 162).

The third (`small_m`): the same two changes on the 64-row tiles (one consumer warpgroup), which `one_wave` leaves
alone, at the 29 rule-check shapes (skinny ones and 1000^3) whose pick is a 64-row tile with one item per cluster at
most: both changes, and the static walk alone.

    python gemm_few_items_probe.py OUT_DIR [first|rule|small_m]
    (its runs: gemm_few_items_<commit>.csv, gemm_few_items_rule_<commit>.csv, gemm_few_items_small_m_<commit>.csv)"""
import dataclasses
import sys

import pandas as pd
import torch

from gemm_kernels import hopper_host

from gemm_kernels import configs, hopper_options, rule
from probe_rows import save, timed_rows

SHAPES = [(1024, 2048, 1024), (1024, 2048, 4096), (2048, 1024, 1024), (2048, 1024, 4096), (1024, 4096, 1024),
          (1024, 4096, 4096), (1536, 6144, 1024), (2048, 1024, 8192), (4096, 2048, 1024), (1024, 1024, 1024),
          (4096, 4096, 4096)]


RULE_SHAPES = [(1024, 1024, 1024), (1024, 2048, 1024), (2048, 1024, 1024), (128, 8192, 4096), (1024, 2048, 4096),
               (2048, 1024, 4096), (256, 8192, 4096), (512, 4096, 4096), (96, 12288, 8192), (128, 14336, 8192),
               (1024, 2048, 8192), (2048, 1024, 8192), (256, 8192, 8192), (512, 4096, 8192), (256, 8192, 14336),
               (512, 4096, 14336), (2048, 1024, 16384)]


def first(M: int, N: int, K: int) -> dict:
    pick = configs.HOPPER_CANDIDATES[rule.choose(M, N, K)]
    return {"static walk": dataclasses.replace(pick, dynamic=False),
            "staged epilogue": dataclasses.replace(pick, epilogue="staged", stages=None),
            "static, staged": dataclasses.replace(pick, dynamic=False, epilogue="staged", stages=None)}


def one_wave(M: int, N: int, K: int) -> dict:
    return {"one wave": hopper_options.one_wave(configs.HOPPER_CANDIDATES[rule.choose(M, N, K)], M, N)}


SMALL_M_SHAPES = [(16, 4096, 4096), (16, 4096, 8192), (16, 8192, 4096), (32, 6144, 4096), (16, 4096, 14336),
                  (16, 14336, 4096), (1000, 1000, 1000), (16, 8192, 8192), (64, 4096, 4096), (16, 8192, 14336),
                  (16, 14336, 8192), (64, 4096, 8192), (64, 8192, 4096), (128, 4096, 4096), (16, 14336, 14336),
                  (64, 4096, 14336), (64, 14336, 4096), (64, 8192, 8192), (128, 4096, 8192), (256, 4096, 4096),
                  (200, 4096, 6144), (64, 8192, 14336), (64, 14336, 8192), (128, 4096, 14336), (128, 8192, 8192),
                  (256, 4096, 8192), (64, 14336, 14336), (128, 8192, 14336), (256, 4096, 14336)]


def small_m(M: int, N: int, K: int) -> dict:
    pick = configs.HOPPER_CANDIDATES[rule.choose(M, N, K)]
    return {"static, staged": dataclasses.replace(pick, dynamic=False, epilogue="staged", stages=None,
                                                  defer_epilogue=None, clamp_a_box=None),
            "static walk": dataclasses.replace(pick, dynamic=False)}


ROUNDS = {"first": (SHAPES, first), "rule": (RULE_SHAPES, one_wave), "small_m": (SMALL_M_SHAPES, small_m)}


def main(out_dir: str, round_name: str = "first") -> None:
    g = torch.Generator(device="cuda").manual_seed(23)
    shapes, builds = ROUNDS[round_name]
    rows = []
    for M, N, K in shapes:
        name = rule.choose(M, N, K)
        fns = {"torch.matmul": torch.matmul, f"pick: {name}": configs.HOPPER_CANDIDATES[name], **builds(M, N, K)}
        fns = {f: (o if f == "torch.matmul" else (lambda a, b, o=o, out=None: hopper_host.gemm(a, b, o, out=out)))
               for f, o in fns.items()}
        ints = [torch.randint(-2, 3, s, device="cuda", generator=g).bfloat16() for s in ((M, K), (K, N))]
        want = torch.matmul(ints[0].float(), ints[1].float()).bfloat16()
        for f, fn in fns.items():      # exact on small integers, into an output poisoned first
            if f != "torch.matmul":
                out = torch.full((M, N), float("nan"), device="cuda").bfloat16()
                assert torch.equal(fn(*ints, out=out), want), (M, N, K, f)
        sets = [(torch.randn(M, K, device="cuda", generator=g).bfloat16(),
                 torch.randn(K, N, device="cuda", generator=g).bfloat16()) for _ in range(2)]
        rows += timed_rows(fns, sets, f"pick: {name}", 8, M=M, N=N, K=K, pick=name)
        df = save(rows, f"{out_dir}/gemm_few_items{'' if round_name == 'first' else '_' + round_name}.csv")
    pd.set_option("display.width", 220)
    print(df.pivot_table(index=["M", "N", "K", "pick", "contender"], columns="timing", values="ratio")
          .round(3).to_string())


if __name__ == "__main__":
    main(*sys.argv[1:])
