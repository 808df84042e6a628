"""tools/soak.py's harness on the CPU, the kernels stood in for by the reference and torch: every call is checked
(a wrong answer is counted), argument sets are reused as well as fresh, the Lloyd loop is deterministic, and the
summary's verdict follows its checks. The soak itself runs on a GPU (`python tools/soak.py`)."""
from __future__ import annotations

import contextlib
import importlib.util
import random

import pytest
import torch

from workbook import ROOT


@pytest.fixture
def soak(monkeypatch):
    spec = importlib.util.spec_from_file_location("soak", ROOT / "tools" / "soak.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "DEVICE", "cpu")
    from kmeans_kernels import reference

    def assign(x, c, *, c_sq=None, out=None):
        ids = reference.assign(x, c, c_sq)
        return ids if out is None else out.copy_(ids)

    def gemm(a, b, *, out=None, narrow_ns=None):
        c = (a.float() @ b.float()).to(torch.bfloat16)
        return c if out is None else out.copy_(c)

    monkeypatch.setattr(module.kmeans_kernels, "assign", assign)
    monkeypatch.setattr(module.gemm_kernels, "gemm", gemm)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    # small shapes only: the CPU reference is slow
    monkeypatch.setattr(module.KmeansSoak, "new_case", _smaller(module.KmeansSoak.new_case))
    monkeypatch.setattr(module.GemmSoak, "new_case", _smaller(module.GemmSoak.new_case))
    return module


class Stream:
    def wait_stream(self, other):
        pass


def _smaller(new_case):
    def smaller(self):
        real = self.rng
        self.rng = _Capped(real)
        try:
            return new_case(self)
        finally:
            self.rng = real
    return smaller


class _Capped:
    """A random.Random whose randint stays small: CPU-sized shapes from the soak's own generator code."""

    def __init__(self, rng):
        self._rng = rng

    def randint(self, lo, hi):
        return self._rng.randint(min(lo, 40), min(hi, 64))

    def __getattr__(self, name):
        return getattr(self._rng, name)


def _soaks(soak, seed=3):
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    return soak.KmeansSoak(rng, gen, Stream()), soak.GemmSoak(rng, gen, Stream())


def test_every_call_is_checked_and_argument_sets_are_reused(soak):
    for s in _soaks(soak):
        for _ in range(150):
            s.step()
        assert s.calls == 150 and s.mismatches == 0, s.failures
        assert s.reused > 10 and s.fresh > 50


def test_a_wrong_answer_is_counted(soak, monkeypatch):
    kmeans, gemm = _soaks(soak)
    real_assign, real_gemm = soak.kmeans_kernels.assign, soak.gemm_kernels.gemm
    monkeypatch.setattr(soak.kmeans_kernels, "assign", lambda x, c, c_sq=None, out=None:
                        real_assign(x, c, c_sq=c_sq, out=out).clamp_max(0))
    monkeypatch.setattr(soak.gemm_kernels, "gemm", lambda a, b, out=None, narrow_ns=None:
                        real_gemm(a, b, out=out).mul_(2))
    for s in (kmeans, gemm):
        for _ in range(30):
            s.step()
        assert s.mismatches > 0 and s.failures


def test_an_unwritten_output_is_caught(soak, monkeypatch):
    kmeans, gemm = _soaks(soak)
    monkeypatch.setattr(soak.kmeans_kernels, "assign", lambda x, c, c_sq=None, out=None: out)
    monkeypatch.setattr(soak.gemm_kernels, "gemm", lambda a, b, out=None, narrow_ns=None: out)
    for s in (kmeans, gemm):
        for _ in range(10):
            s.step()
        assert s.mismatches == 10


def test_lloyd_is_deterministic_with_a_new_centroid_tensor_each_iteration(soak):
    gen = torch.Generator().manual_seed(5)
    x = soak.small_integers((2000, 16), gen, torch.bfloat16)
    c0 = x[:32].clone()
    ids, c = soak.lloyd(x, c0, 4)
    again = soak.lloyd(x, c0, 4)
    assert torch.equal(ids, again[0]) and torch.equal(c, again[1])
    assert c.dtype == x.dtype and c.shape == c0.shape and c.data_ptr() != c0.data_ptr()


def test_the_verdict_follows_the_checks(soak, capsys):
    soaks = _soaks(soak)
    for s in soaks:
        for _ in range(20):
            s.step()
    start, end = {"allocated": 10 << 20, "driver_used": 1 << 30}, {"allocated": 11 << 20, "driver_used": 1 << 30}
    lloyd = {"iterations": 5, "identical": True, "clusters_used": 3}
    good = soak.summarize("cpu", 1, soaks, start, end, [], lloyd, {"warmup": 1, "soak": 2, "total": 3})
    assert good["ok"]
    soak.print_table(good, "soak.json")
    assert "PASS" in capsys.readouterr().out.splitlines()[-1]
    grown = soak.summarize("cpu", 1, soaks, start, {**end, "driver_used": int(1.02 * (1 << 30))}, [], lloyd,
                           good["seconds"])
    assert not grown["ok"]
    assert not soak.summarize("cpu", 1, soaks, start, end, [], {**lloyd, "identical": False}, good["seconds"])["ok"]
    soaks[0].mismatches = 1
    assert not soak.summarize("cpu", 1, soaks, start, end, [], lloyd, good["seconds"])["ok"]
