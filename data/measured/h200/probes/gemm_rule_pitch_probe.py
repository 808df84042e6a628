"""Probe: does the rule's pitch distance (`rule.PITCH_DISTANCE`) pick faster configurations where it changes the
choice? At each shape below the rule with the distance at 1 (this probe sets it, for the pick that
`probe_rows.gemm_rows` times as its baseline) and at 0 choose differently; both picks are timed taking turns with
torch.matmul, each exact on small integers first.
Shapes: the five of the rule check whose choice moves, then eleven drawn at random (M, N, K multiples of 8 from
256 to 12000, seed 7) among those whose choice moves. Ratios are the pitch-free pick's time over the package's
pick's (> 1: the pitch distance would pay).
    python gemm_rule_pitch_probe.py OUT_DIR   (its run: gemm_rule_pitch_<commit>.csv)"""
import sys

import pandas as pd
import torch

from gemm_kernels import configs, rule
from probe_rows import gemm_rows, save

SHAPES = [(1500, 2504, 3000), (999, 7000, 5000), (2560, 2560, 2560), (6000, 3000, 2000), (6144, 2048, 4096),
          (5368, 2528, 6528), (3576, 672, 1472), (4000, 1544, 9088), (4128, 3008, 11512), (1592, 4480, 7824),
          (4768, 2176, 4120), (6624, 1080, 3184), (2720, 1864, 5632), (2424, 1736, 5672), (6624, 3776, 3336),
          (2848, 2144, 512)]


def pitch_free_pick(M, N, K):
    kept, rule.PITCH_DISTANCE = rule.PITCH_DISTANCE, 0.0
    try:
        return rule.learned().choose(M, N, K)
    finally:
        rule.PITCH_DISTANCE = kept


def main(out_dir):
    rule.PITCH_DISTANCE = 1.0   # before any rule.choose: it caches its answers
    rows = []
    g = torch.Generator(device="cuda").manual_seed(31)
    for M, N, K in SHAPES:
        old = pitch_free_pick(M, N, K)
        assert old != rule.choose(M, N, K), (M, N, K, old)
        rows += gemm_rows(M, N, K, {f"no pitch: {old}": configs.HOPPER_CANDIDATES[old]}, g, 8, input_sets=2)
        df = save(rows, f"{out_dir}/gemm_rule_pitch.csv")
    pd.set_option("display.width", 220)
    print(df.pivot_table(index=["M", "N", "K", "contender"], columns="timing", values="ratio").round(3).to_string())


if __name__ == "__main__":
    main(sys.argv[1])
