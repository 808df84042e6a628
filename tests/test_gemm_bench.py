"""The GEMM benchmark's command line: the right configurations per GPU, and a clear refusal elsewhere."""
import pytest

from gemm_kernels import bench, blackwell, hopper


def test_each_arch_times_its_own_kernels():
    h = bench.configs("sm_90a")
    assert list(h) == list(bench.VARIANTS) and all(fn is hopper.gemm for fn, _ in h.values())
    b = bench.configs("sm_100a")
    assert [c["name"] for c in blackwell.bench_configs()] == list(b)
    assert all(fn is blackwell.gemm for fn, _ in b.values())


def test_b200_default_shapes_are_the_seeds_squares():
    assert bench.default_shapes("sm_100a") == [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384)]


def test_refuses_without_a_gpu(monkeypatch):
    from workbook import gpus
    monkeypatch.setattr(gpus, "current", lambda device=None: None)
    with pytest.raises(SystemExit, match="needs a GPU"):
        bench.main(["--gpu", "b200"])


def test_refuses_a_b200_run_on_an_h200(monkeypatch):
    from workbook import gpus
    monkeypatch.setattr(gpus, "current", lambda device=None: gpus.H200)
    with pytest.raises(SystemExit, match="asked for b200.*H200"):
        bench.main(["--gpu", "b200"])


def test_bad_shape_text_is_named():
    with pytest.raises(SystemExit):
        bench.main(["--shapes", "4096x4096"])


def test_torch_only_needs_shapes(monkeypatch):
    from workbook import gpus
    monkeypatch.setattr(gpus, "current", lambda device=None: gpus.H200)
    with pytest.raises(SystemExit, match="--torch-only needs --shapes"):
        bench.main(["--torch-only"])


def test_default_variant_is_what_gemm_runs_by_default():
    import inspect
    kw = dict(bench.VARIANTS[bench.DEFAULT_VARIANT])
    band_rows = kw.pop("band_rows", inspect.signature(hopper.gemm).parameters["band_rows"].default)
    assert band_rows == inspect.signature(hopper.gemm).parameters["band_rows"].default
    for M, N in ((8192, 8192), (2048, 5120), (4096, 4096)):
        assert hopper.config_for(M, N, **kw) == hopper.config_for(M, N)


def test_sweep_covers_the_grid_once():
    shapes = bench.sweep_shapes()
    assert len(shapes) == len(set(shapes)) == len(bench.SWEEP_SIDES) ** 2
    assert {K for _, _, K in shapes} == {bench.SWEEP_K}
