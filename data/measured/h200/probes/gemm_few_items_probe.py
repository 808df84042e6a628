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

    python gemm_few_items_probe.py OUT_DIR   (its run: gemm_few_items_<commit>.csv)"""
import dataclasses
import sys

import pandas as pd
import torch

from gemm_kernels import rule
from probe_rows import gemm_rows, save

SHAPES = [(1024, 2048, 1024), (1024, 2048, 4096), (2048, 1024, 1024), (2048, 1024, 4096), (1024, 4096, 1024),
          (1024, 4096, 4096), (1536, 6144, 1024), (2048, 1024, 8192), (4096, 2048, 1024), (1024, 1024, 1024),
          (4096, 4096, 4096)]


def builds(M: int, N: int, K: int) -> dict:
    pick = rule.options_for(M, N, K)
    return {"static walk": dataclasses.replace(pick, dynamic=False),
            "staged epilogue": dataclasses.replace(pick, epilogue="staged", stages=None),
            "static, staged": dataclasses.replace(pick, dynamic=False, epilogue="staged", stages=None)}


def main(out_dir: str) -> None:
    g = torch.Generator(device="cuda").manual_seed(23)
    rows = []
    for M, N, K in SHAPES:
        rows += gemm_rows(M, N, K, builds(M, N, K), g, 8, input_sets=2, pick=rule.choose(M, N, K))
        df = save(rows, f"{out_dir}/gemm_few_items.csv")
    pd.set_option("display.width", 220)
    print(df.pivot_table(index=["M", "N", "K", "pick", "contender"], columns="timing", values="ratio")
          .round(3).to_string())


if __name__ == "__main__":
    main(*sys.argv[1:])
