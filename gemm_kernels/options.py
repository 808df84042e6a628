"""What both GEMM backends' `Options` share: a frozen dataclass whose default is made once, and `of`, which
applies keyword overrides to it or to given options. Each backend's fields and checks are its own
(`hopper_options.Options`, `blackwell_options.Options`)."""
from __future__ import annotations

import dataclasses
import functools


class BackendOptions:
    """Base of a backend's frozen `Options` dataclass."""

    @classmethod
    def default(cls):
        """`cls()`, checked once and then shared (a call with no options costs no checks)."""
        return _default(cls)

    @classmethod
    def of(cls, options=None, **overrides):
        """`options` (default: `cls.default()`) with the fields in `overrides` replaced (and checked)."""
        if options is None:
            options = cls.default()
        elif not isinstance(options, cls):
            raise ValueError(f"options must be a {cls.__module__}.{cls.__qualname__}, got {type(options).__name__}")
        return dataclasses.replace(options, **overrides) if overrides else options


@functools.cache
def _default(cls):
    return cls()
