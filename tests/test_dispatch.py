"""workbook.dispatch: one table of backend modules per kernel package, and the device rule."""
import pytest
import torch

from workbook import dispatch

TABLE = dispatch.Backends("demo", {"sm_90a": "json", "sm_100a": "csv"}, instead="the reference")


def _capability(monkeypatch, cc, name="a test GPU"):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: cc)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: name)
    dispatch._arch_of_index.cache_clear()      # a stand-in device that changes its capability


def test_module_by_arch_and_unknown_arch_named():
    import csv
    import json
    assert TABLE.module("sm_90a") is json and TABLE.module("sm_100a") is csv
    with pytest.raises(ValueError, match="no demo kernels for arch 'sm_120a'.*sm_100a.*sm_90a"):
        TABLE.module("sm_120a")


def test_arch_of_follows_the_compute_capability(monkeypatch):
    _capability(monkeypatch, (9, 0))
    assert TABLE.arch_of(torch.device("cuda", 0)) == "sm_90a"
    _capability(monkeypatch, (10, 0))
    assert TABLE.arch_of(torch.device("cuda", 0)) == "sm_100a"
    _capability(monkeypatch, (12, 0), "NVIDIA RTX PRO 6000")
    with pytest.raises(ValueError, match="RTX PRO 6000 is sm_120: the demo kernels.*sm_90a.*sm_100a.*the reference"):
        TABLE.arch_of(torch.device("cuda", 0))


def test_a_table_without_an_arch_refuses_its_devices(monkeypatch):
    hopper_only = dispatch.Backends("demo", {"sm_90a": "json"}, instead="x")
    _capability(monkeypatch, (10, 0))
    with pytest.raises(ValueError, match="sm_100a"):
        hopper_only.arch_of(torch.device("cuda", 0))


def test_both_packages_dispatch_through_it():
    import gemm_kernels
    import kmeans_kernels
    assert isinstance(gemm_kernels.BACKENDS, dispatch.Backends) and isinstance(kmeans_kernels.BACKENDS, dispatch.Backends)
    assert gemm_kernels.BACKENDS.archs == kmeans_kernels.BACKENDS.archs == ("sm_90a", "sm_100a")


def test_arch_is_looked_up_once_per_device(monkeypatch):
    asked = []

    def capability(d=None):
        asked.append(d)
        return (9, 0)

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    for device in (torch.device("cuda", 0), "cuda:0", 0, torch.device("cuda", 1)):
        assert TABLE.arch_of(device) == "sm_90a"
    assert asked == [0, 1]
