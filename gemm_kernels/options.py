"""What both GEMM backends' `Options` share: a frozen dataclass whose default is made once, `of`, which applies
keyword overrides to it or to given options (remembered), and a hash computed once (options are a cache key on every call,
and the per-call-synchronised timing counts host microseconds). Each backend's fields and checks are its own
(`hopper_options.Options`, `blackwell_options.Options`); each ends its `__post_init__` with `_seal()` and sets
`__hash__ = BackendOptions.cached_hash` in its class body (a dataclass keeps an explicit `__hash__`)."""
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
        """`options` (default: `cls.default()`) with the fields in `overrides` replaced (and checked). The result
        for hashable overrides is remembered: a timed call that names its options by keyword pays the checks
        once, not on every call."""
        if options is None:
            options = cls.default()
        elif not isinstance(options, cls):
            raise ValueError(f"options must be a {cls.__module__}.{cls.__qualname__}, got {type(options).__name__}")
        if not overrides:
            return options
        key = (cls, options, tuple(overrides.items()))
        try:
            return _WITH_OVERRIDES[key]
        except KeyError:
            pass
        except TypeError:       # an unhashable value (a list of widths, say): checked afresh
            return dataclasses.replace(options, **overrides)
        if len(_WITH_OVERRIDES) >= 256:
            _WITH_OVERRIDES.clear()
        found = _WITH_OVERRIDES[key] = dataclasses.replace(options, **overrides)
        return found

    def _seal(self) -> None:
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self))))

    def cached_hash(self) -> int:
        return self._hash


_WITH_OVERRIDES: dict = {}   # (class, options, keyword items) -> options


@functools.cache
def _default(cls):
    return cls()
