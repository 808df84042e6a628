"""The GEMM benchmark's command line: the right configurations per GPU, and a clear refusal elsewhere."""
import pytest

from gemm_kernels import bench, blackwell_host, configs, hopper_host, hopper_options


def test_each_arch_times_its_own_kernels():
    h = bench.contenders("sm_90a")
    assert list(h) == list(configs.HOPPER) and all(fn is hopper_host.gemm for fn, _ in h.values())
    b = bench.contenders("sm_100a")
    assert list(configs.BLACKWELL) == list(b)
    assert all(fn is blackwell_host.gemm for fn, _ in b.values())


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
    default = configs.HOPPER[configs.HOPPER_DEFAULT]
    band_rows = default.band_rows
    assert band_rows == hopper_options.Options().band_rows
    for M, N in ((8192, 8192), (2048, 5120), (4096, 4096)):
        assert hopper_options.config_for(M, N, default) == hopper_options.config_for(M, N)
        assert hopper_options.plan_for(M, N, default) == hopper_options.plan_for(M, N)


def test_sweep_covers_the_grid_once():
    shapes = bench.sweep_shapes()
    assert len(shapes) == len(set(shapes)) == len(bench.SWEEP_SIDES) ** 2
    assert {K for _, _, K in shapes} == {bench.SWEEP_K}


def test_named_configurations_have_one_home():
    from gemm_kernels import blackwell_options
    assert configs.for_arch("sm_90a") is configs.HOPPER and configs.for_arch("sm_100a") is configs.BLACKWELL
    assert all(isinstance(o, hopper_options.Options) for o in [*configs.HOPPER.values(), *configs.HOPPER_TIMELINES.values()])
    assert all(isinstance(o, blackwell_options.Options) for o in configs.BLACKWELL.values())
    assert configs.HOPPER_DEFAULT in configs.HOPPER and configs.HOPPER_TIMELINES["default"] == hopper_options.Options()
    table = configs.table()
    assert list(table.name) == [*configs.HOPPER, *configs.BLACKWELL]
    with pytest.raises(ValueError, match="sm_120a"):
        configs.for_arch("sm_120a")


def test_the_cublas_ceiling_lies_below_the_datasheet_and_is_sourced():
    from gemm_kernels import ceiling
    from workbook import gpus
    tflops = ceiling.CUBLAS_BF16_TFLOPS
    assert tflops[4096] < tflops[8192] < gpus.H200.bf16_dense_tflops
    assert "our H200" in ceiling.SOURCE and all(f"{size}" in ceiling.SOURCE for size in tflops)
    with pytest.raises(TypeError):
        tflops[4096] = 1.0
