"""The one interface between the shape explorer and a kernel package: a `Problem` (its dimensions, FLOPs,
bytes, configurations) and the `Waves` of each configuration (its work items on the GPU's slots)."""
from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from workbook import gpus

MAX_ELEMENTS = 2**31 - 1       # what 32-bit indexing reaches: the kernels index their tensors with int32


@dataclass(frozen=True)
class Dim:
    """One dimension of a problem shape: its name, the value the explorer starts at, the range it offers, and
    the multiple the kernels need (16, say, where a tensor-core K step is 16 elements; else 1)."""
    name: str
    default: int
    low: int
    high: int
    multiple: int = 1

    def values(self, low: int, high: int, count: int) -> list[int]:
        """About `count` values from `low` to `high`, evenly spaced on a log axis, each a multiple of
        `multiple`, none repeated, both ends included (rounded to the multiple)."""
        if not (isinstance(count, int) and count >= 2):
            raise ValueError(f"a sweep needs at least 2 points, got {count!r}")
        lo, hi = sorted((int(low), int(high)))
        if lo < 1:
            raise ValueError(f"{self.name} must be >= 1 to sweep, got {lo}")
        m = self.multiple
        out = []
        for i in range(count):
            v = lo * (hi / lo) ** (i / (count - 1))
            v = max(m, int(round(v / m)) * m)
            if not out or v > out[-1]:
                out.append(v)
        return out


@dataclass(frozen=True)
class Waves:
    """How one configuration's work falls onto the GPU: `items` work items (CTAs, or CTA pairs), `slots` of
    them running at once, the last slot finishing at `makespan` (in units of one full item's run time),
    `busy` item-time of work in all (equal to `items` when all items are full size). `item_flops`: the
    tensor-core operations of one full item, with the padding of a tile that hangs over the edge."""
    items: int
    slots: int
    makespan: float
    busy: float
    item_flops: float
    slot: str = "SM"          # what one slot is, for the pictures: "SM", "CTA pair", "CTA (2 per SM)"
    tile: str = ""            # what one item is, e.g. "M128 x N256"
    schedule: Callable[[], Sequence[Sequence[tuple[float, float, str]]]] | None = field(
        default=None, compare=False, repr=False)   # per slot, (start, duration, label); default: equal items

    @property
    def waves(self) -> float:
        """Items per slot: 3.46 means three full waves and a last one 46 % full."""
        return self.items / self.slots

    @property
    def efficiency(self) -> float:
        """The share of slot-time doing work until the last slot finishes (1.0: no tail)."""
        return self.busy / (self.makespan * self.slots)

    @property
    def last_wave_fill(self) -> float:
        full = math.ceil(self.items / self.slots)
        return (self.items - (full - 1) * self.slots) / self.slots

    def compute_ms(self, gpu: gpus.GpuSpec) -> float:
        """The model's math time: the makespan, an item taking its FLOPs at a slot's share of the peak."""
        return self.makespan * self.item_flops * self.slots / (gpu.bf16_dense_tflops * 1e12) * 1e3

    def gantt(self) -> list[list[tuple[float, float, str]]]:
        """What `plots.wave_occupancy` draws: per slot, (start, duration, label) of each item."""
        if self.schedule is not None:
            return [list(row) for row in self.schedule()]
        return [[(float(w), 1.0, self.tile or "work item") for w in range(self.items // self.slots
                                                                          + (s < self.items % self.slots))]
                for s in range(self.slots)]

    def describe(self) -> str:
        tile = f" ({self.tile})" if self.tile else ""
        return (f"{self.items:,} items{tile} on {self.slots} slots ({self.slot}) = {self.waves:.2f} waves, "
                f"makespan {self.makespan:.2f}, wave efficiency {self.efficiency:.1%}")


def uniform_waves(items: int, slots: int, item_flops: float, *, slot: str = "SM", tile: str = "") -> Waves:
    """Equal items on `slots` slots, each slot taking the next item as it frees: ceil(items / slots) waves."""
    if items < 1 or slots < 1:
        raise ValueError(f"need items >= 1 and slots >= 1, got {items} and {slots}")
    return Waves(items=items, slots=slots, makespan=float(math.ceil(items / slots)), busy=float(items),
                 item_flops=float(item_flops), slot=slot, tile=tile)


@dataclass(frozen=True)
class Reference:
    """A latency someone else measured and published, of exactly the explored shape (not ours: say whose)."""
    name: str
    ms: float
    source: str


class Problem(abc.ABC):
    """What a kernel package tells the explorer about its problem. Subclasses set the class attributes and
    implement the abstract methods; `references`, `describe` and `measure` are optional."""
    name: str                          # shown in the UI, e.g. "matrix product"
    dims: tuple[Dim, ...]              # the shape's dimensions, in order
    table: str                         # its benchmark's table: data/measured/<gpu>/<table>.csv
    gpus: tuple[str, ...] = ("h200", "b200")
    model: str = "wave model"          # one line on what the prediction counts, for captions
    baselines: tuple[str, ...] = ()    # configurations that are someone else's library (torch, cuBLAS)

    def shape(self, values: Sequence[int]) -> tuple[int, ...]:
        """`values` as a shape, or a ValueError in words for anything that is not one."""
        values = tuple(values)
        names = tuple(d.name for d in self.dims)
        if len(values) != len(names):
            raise ValueError(f"a {self.name} shape is ({', '.join(names)}); got {len(values)} numbers")
        for name, v in zip(names, values):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        return values

    def label(self, shape: Sequence[int]) -> str:
        return ", ".join(f"{d.name}={v:,}" for d, v in zip(self.dims, shape))

    @abc.abstractmethod
    def check(self, shape: tuple[int, ...], gpu: gpus.GpuSpec) -> None:
        """Raise ValueError, saying why, if the kernels refuse this shape on this GPU."""

    @abc.abstractmethod
    def flops(self, shape: tuple[int, ...]) -> float:
        """Tensor-core operations of the problem (2 per multiply-add), without padding."""

    @abc.abstractmethod
    def nbytes(self, shape: tuple[int, ...]) -> float:
        """The least HBM traffic: every input read once, every output written once."""

    @abc.abstractmethod
    def configurations(self, gpu: gpus.GpuSpec) -> list[str]:
        """Our named configurations for this GPU in tutorial order, then the baselines, each named as the
        benchmark records it (`record_label` of its kernel and variant columns)."""

    @abc.abstractmethod
    def waves(self, shape: tuple[int, ...], gpu: gpus.GpuSpec, configuration: str) -> Waves | None:
        """The configuration's work on the GPU's slots; None where it is not modelled (a vendor library)."""

    def describe(self, configuration: str, gpu: gpus.GpuSpec) -> str:
        """One line: what the configuration is made of on this GPU."""
        return ""

    def references(self, shape: tuple[int, ...], gpu: gpus.GpuSpec) -> list[Reference]:
        """Published latencies of exactly this shape on this GPU (other people's kernels)."""
        return []

    def measure(self, shape: tuple[int, ...], configuration: str) -> float | None:
        """Median ms of the configuration timed now on this machine's GPU; None when it cannot be run here."""
        return None

