"""The exercise of notebook 09: which cluster does a point join after one Lloyd iteration?

Six points on a line and two starting centroids; the learner predicts where point P goes once the centroids
have moved, `check(answer)` says whether that is what `kmeans_kernels.fit` does, and why.
"""
from __future__ import annotations

import torch

import kmeans_kernels

NAMES = ("A", "B", "P", "C", "D", "E")
POINTS = ((0, 0), (1, 0), (3, 0), (4, 0), (5, 0), (13, 0))
START = ((0, 0), (2, 0))
POINT = NAMES.index("P")


def problem() -> tuple[torch.Tensor, torch.Tensor]:
    """(x bf16 [6, 2], the two starting centroids fp32 [2, 2]): every value exact in bf16."""
    return torch.tensor(POINTS, dtype=torch.bfloat16), torch.tensor(START, dtype=torch.float32)


def after_one_iteration() -> kmeans_kernels.FitResult:
    x, c0 = problem()
    return kmeans_kernels.fit(x, 2, init=c0, iters=1)


def check(answer) -> bool:
    """Print whether `answer` (0 or 1) is the cluster P joins after one iteration, with a hint if not."""
    r = after_one_iteration()
    right = int(r.ids[POINT])
    if answer is None:
        print("Set `answer` to 0 or 1 first.")
        return False
    if answer == right:
        print(f"Right: P joins cluster {right}. The centroids moved to {r.centroids[:, 0].tolist()} (x coordinate).")
        return True
    print("Not quite. Assign all six points to the two starting centroids first (B is exactly halfway: the "
          "lowest index wins), move each centroid to the mean of its points, then measure P again.")
    return False
