"""How often `reduce.scan_lazy` must search a tile for its index (`reduce.lazy_search_odds`), at the seed shapes'
D and K, on data in no particular order and on clustered data: the odds that decide whether the lazy scan's
cheaper common case pays for its search. CPU arithmetic, no kernel.

    python tools/kmeans_lazy_odds.py [--rows 8192]
"""
from __future__ import annotations

import argparse

from kmeans_kernels import reduce


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=8192)
    args = p.parse_args(argv)
    print("D     K  data       1 row  8 rows 16 rows")
    for D in (64, 128, 256):
        for K in (512, 4096, 16384):
            for clustered in (False, True):
                odds = reduce.lazy_search_odds(args.rows, D, K, clustered)
                print(f"{D:3d} {K:5d}  {'clustered' if clustered else 'random   '}  "
                      + "  ".join(f"{odds[r]:6.3f}" for r in (1, 8, 16)))


if __name__ == "__main__":
    main()
