"""Which backend module serves which GPU: one table per kernel package, the device rule in one place.

    BACKENDS = dispatch.Backends("widget", {"sm_90a": "pkg.hopper", "sm_100a": "pkg.blackwell"},
                                 instead="pkg.reference")
    BACKENDS.module("sm_90a")        # the backend module, imported on first use
    BACKENDS.arch_of(device)         # "sm_90a" or "sm_100a" for this CUDA device, else a ValueError

A package's kernels are compiled for an arch ("sm_90a", "sm_100a"), and a CUDA device runs the kernels of
the arch its compute capability names (`workbook.gpus`): 9.0 -> sm_90a, 10.0 -> sm_100a. Every other device
gets a ValueError that names it and says what to use instead (sm_120 consumer Blackwell has no tcgen05 2-SM
MMA, so it gets none of these kernels).
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import torch

from workbook import gpus


@dataclass(frozen=True)
class Backends:
    """The backend modules of one kernel package, by arch. `what` names the kernels in messages; `instead`
    is what a user of any other device should call."""
    what: str
    modules: Mapping[str, str]
    instead: str

    def __post_init__(self):
        object.__setattr__(self, "modules", MappingProxyType(dict(self.modules)))

    @property
    def archs(self) -> tuple[str, ...]:
        return tuple(self.modules)

    def module(self, arch: str):
        """The backend module for `arch`, imported on first use (the kernel modules need CuTe DSL)."""
        if arch not in self.modules:
            raise ValueError(f"no {self.what} kernels for arch {arch!r}; kernels exist for {sorted(self.archs)}")
        return _import(self.modules[arch])

    def arch_of(self, device) -> str:
        """The arch whose kernels run on this CUDA device; a ValueError naming the device and `instead`
        on any other."""
        arch = _arch_of_index(_index(device))
        if arch not in self.modules:
            raise ValueError(f"{torch.cuda.get_device_name(device)} is {arch}: the {self.what} kernels are built "
                             f"for {' and '.join(f'{a} ({gpus.FAMILIES.get(a, a)})' for a in self.archs)} only; "
                             f"use {self.instead}")
        return arch


# Both run on every kernel call, so they are looked up once: a device's compute capability never changes.
@functools.lru_cache(maxsize=None)
def _arch_of_index(index: int) -> str:
    return gpus.arch_of_capability(*torch.cuda.get_device_capability(index))


_import = functools.lru_cache(maxsize=None)(importlib.import_module)


def _index(device) -> int:
    """The CUDA device index of a torch.device, a string like "cuda:1", an int, or None (the current device)."""
    if isinstance(device, int):
        return device
    if device is None:
        return torch.cuda.current_device()
    index = torch.device(device).index
    return torch.cuda.current_device() if index is None else index
