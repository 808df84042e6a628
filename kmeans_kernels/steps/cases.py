"""The inputs every step kernel must get exactly right: adversarial cases with their reference answers.

    for case in cases.adversarial(device="cuda"):
        got = step.assign(case.x, case.c, case.c_sq)
        case.expect                    # kmeans_kernels.reference.assign on the same inputs (or a stated answer)

The inputs are small integers in bf16 (or fp16), so every product and every fp32 partial sum is exact and the
answer must equal the reference bit for bit. Each case names what it tests: ties within and across centroid
tiles (128 and 256 wide), NaN and +-inf in points and centroids, a row with no winner, signed zeros, tails in N,
K and D, fp16, and a given c_sq. Fresh inputs on every call unless `seed` is given.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from kmeans_kernels import reference

POISON = -7          # what outputs are filled with before a call: a row never written keeps it


@dataclass
class Case:
    name: str
    x: torch.Tensor
    c: torch.Tensor
    c_sq: torch.Tensor | None = None
    expect: torch.Tensor | None = None
    what: str = ""

    def __post_init__(self):
        if self.expect is None:
            self.expect = reference.assign(self.x, self.c, self.c_sq)

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.x.shape[0], self.x.shape[1], self.c.shape[0]


def small_integers(rows: int, D: int, gen: torch.Generator, dtype=torch.bfloat16, lo: int = -3, hi: int = 4):
    """Values in [lo, hi): exact products and partial sums, so exact scores and many exact ties."""
    return torch.randint(lo, hi, (rows, D), generator=gen).to(dtype)


def adversarial(device: str | torch.device = "cuda", *, seed: int | None = None, D: int = 128,
                odd_D: int | None = 80, fp16: bool = True) -> list[Case]:
    """The cases, on `device`. `D` is the width of most cases; `odd_D` (not a multiple of 64: a tail inside a
    ring slot) adds one case of that width, `fp16` one fp16 case (each one more compilation per step)."""
    seed = random.randrange(2**31) if seed is None else seed
    gen = torch.Generator().manual_seed(seed)

    def on(*tensors):
        return [t.to(device) for t in tensors]

    out = []
    N, K = 300, 700                         # K: tiles 0-5 of 128 (a 60-wide tail), or 0-2 of 256 (a 188-wide tail)
    x, c = small_integers(N, D, gen), small_integers(K, D, gen)
    # copies of centroid 2 (tile column 2: lane 1 of each quad, chain 0) in the other chain of that lane (3),
    # in later tiles of that lane (10, 130, 131, 290) and in other lanes and tiles (400, 520); the points equal
    # to it have it and its copies as nearest centroids, and 2 must win
    for k in (3, 10, 130, 131, 290, 400, 520):
        c[k] = c[2]
    x[:50] = c[2]
    out.append(Case("ties across tiles", *on(x, c), what="copies of one centroid in several tiles and chains"))
    xc, cc = x.clone(), small_integers(K, D, gen)
    cc[10] = cc[130] = cc[3]                # 3: lane 1, odd column (chain 1); 10, 130: the same lane, chain 0
    xc[:50] = cc[3]
    out.append(Case("ties across chains", *on(xc, cc), what="the lowest tied index in the second chain of a lane"))
    same = c[:1].expand(K, D).contiguous()
    out.append(Case("all centroids equal", *on(x, same), expect=torch.zeros(N, dtype=torch.int32, device=device),
                    what="every score ties: index 0 everywhere"))
    xs, cs = x.clone(), c.clone()
    xs[0] = float("nan")                    # every score NaN: -1
    xs[1, 3] = float("inf")                 # dots of +-inf: -inf scores win where c[:, 3] > 0
    xs[2, 5] = float("-inf")
    cs[11, 0] = float("nan")                # centroid 11 never wins
    cs[12, 1] = float("inf")                # centroid 12: half norm +inf
    cs[650:] = float("inf")                 # the whole tail tile +inf
    out.append(Case("NaN and inf", *on(xs, cs), what="NaN never wins, +inf never wins, -inf wins"))
    allinf = torch.full((K, D), float("inf"), dtype=torch.bfloat16)
    out.append(Case("no winner", *on(x[:5].contiguous(), allinf),
                    expect=torch.full((5,), reference.NO_WINNER, dtype=torch.int32, device=device),
                    what="a row with no finite score gets -1"))
    z = torch.zeros(K, D, dtype=torch.bfloat16)
    z[::2] = -0.0
    z[5:] = c[5:]
    xz = torch.zeros(N, D, dtype=torch.bfloat16)
    xz[:, 0] = -0.0
    out.append(Case("signed zero", *on(xz, z), what="-0 == +0: the lower index wins"))
    for n, k in ((1, 1), (129, 257), (1000, 129)):
        out.append(Case(f"tails N={n} K={k}", *on(small_integers(n, D, gen), small_integers(k, D, gen)),
                        what="a partial tile of points and of centroids"))
    c_sq = reference.centroid_norms(c)
    c_sq[17] = -1e6
    out.append(Case("given c_sq", *on(x, c, c_sq), what="the kernel reads c_sq; centroid 17 wins everywhere"))
    if odd_D:
        out.append(Case(f"D={odd_D}", *on(small_integers(333, odd_D, gen), small_integers(555, odd_D, gen)),
                        what="D not a multiple of the 64-wide ring slot"))
    if fp16:
        out.append(Case("fp16", *on(small_integers(333, D, gen, torch.float16), small_integers(555, D, gen, torch.float16)),
                        what="fp16 inputs"))
    return out


def run(assign, case: Case, **options) -> torch.Tensor:
    """`assign(x, c, c_sq, out)` into an output filled with POISON; the result on the host."""
    out = torch.full((case.x.shape[0],), POISON, dtype=torch.int32, device=case.x.device)
    assign(case.x, case.c, case.c_sq, out, **options)
    if out.is_cuda:
        torch.cuda.synchronize()
    return out


def mismatches(got: torch.Tensor, want: torch.Tensor) -> str:
    """'' when equal; else how many rows differ (and unwritten ones), with the first few."""
    bad = (got.cpu() != want.cpu()).nonzero().flatten()
    if bad.numel() == 0:
        return ""
    unwritten = int((got.cpu() == POISON).sum())
    first = bad[:5].tolist()
    return (f"{bad.numel()} of {got.numel()} rows differ" + (f" ({unwritten} never written)" if unwritten else "")
            + f"; rows {first}: got {got.cpu()[first].tolist()}, want {want.cpu()[first].tolist()}")
