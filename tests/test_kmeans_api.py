"""The public k-means entry points refuse what the kernels cannot do, by name, before touching a GPU."""
import pytest
import torch

import kmeans_kernels


def _xc(N=8, D=64, K=4, dtype=torch.bfloat16, device="cpu"):
    return torch.randn(N, D, device=device).to(dtype), torch.randn(K, D, device=device).to(dtype)


@pytest.mark.parametrize("bad, match", [
    (lambda: kmeans_kernels.assign(*_xc()), "CUDA"),
    (lambda: kmeans_kernels.assign(torch.randn(8), torch.randn(4, 8)), "2-D"),
    (lambda: kmeans_kernels.assign(torch.randn(8, 64), torch.randn(4, 32)), "D mismatch"),
    (lambda: kmeans_kernels.assign(torch.ones(8, 64, dtype=torch.int32), torch.ones(4, 64, dtype=torch.int32)),
     "floating"),
])
def test_assign_rejects_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


def test_check_inputs_names_each_kernel_precondition(monkeypatch):
    x, c = _xc()
    # pretend the tensors are on a GPU so that the kernel-only checks are reached
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda", 0)))
    with pytest.raises(ValueError, match="bf16 or fp16"):
        kmeans_kernels.check_inputs(x.float(), c.float(), None, None)
    with pytest.raises(ValueError, match="D=72"):
        kmeans_kernels.check_inputs(*_xc(D=72), None, None)
    with pytest.raises(ValueError, match="D=1024"):
        kmeans_kernels.check_inputs(*_xc(D=1024), None, None)
    with pytest.raises(ValueError, match="contiguous"):
        kmeans_kernels.check_inputs(x.t().contiguous().t(), c, None, None)
    with pytest.raises(ValueError, match="c_sq"):
        kmeans_kernels.check_inputs(x, c, torch.ones(4, dtype=torch.float64), None)
    with pytest.raises(ValueError, match="out must be"):
        kmeans_kernels.check_inputs(x, c, None, torch.empty(8, dtype=torch.int64))


def test_unknown_arch_and_variant_are_named():
    with pytest.raises(ValueError, match="sm_120a"):
        kmeans_kernels.compile_assign("serial", N=128, D=64, K=128, arch="sm_120a")
    with pytest.raises(ValueError, match="D=72"):
        kmeans_kernels.compile_assign("serial", N=128, D=72, K=128, arch="sm_90a")


def test_arch_of_refuses_other_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (12, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA RTX PRO 6000")
    with pytest.raises(ValueError, match="sm_120.*sm_90a.*sm_100a"):
        kmeans_kernels.arch_of(torch.device("cuda", 0))


def test_one_vocabulary_says_what_each_variant_is_made_of():
    from kmeans_kernels import blackwell, hopper, variants
    # the same name, two recipes: on Blackwell each step is one change from the serial baseline
    assert variants.recipe("sm_90a", "norm_broadcast").scan == "ilp2"
    assert variants.recipe("sm_100a", "norm_broadcast").scan == "serial"
    assert hopper.VARIANTS == variants.names("sm_90a") and blackwell.VARIANTS == variants.names("sm_100a")
    for name, spec in hopper.VARIANT_SPECS.items():
        r = variants.recipe("sm_90a", name)
        assert (spec.scan, spec.broadcast_norms, spec.block_n, spec.ping_pong) == (
            r.scan, r.norms == "shuffle", r.tile_n, r.ping_pong)
    for name, design in blackwell.DESIGNS.items():
        r = variants.recipe("sm_100a", name)
        assert (design.reduction, design.norms, design.warp_specialized) == (r.scan, r.norms, r.warp_specialized)
    table = variants.table()
    assert len(table) == 8 and set(table.arch) == {"sm_90a", "sm_100a"}
    with pytest.raises(ValueError, match="'wide' does not exist for sm_100a"):
        variants.recipe("sm_100a", "wide")
    with pytest.raises(ValueError, match="sm_120a"):
        variants.names("sm_120a")


@pytest.mark.parametrize("D", [0, 8, 24, 520, 1024, 16.0, True])
def test_the_d_rule_has_one_home(D):
    from kmeans_kernels import variants
    with pytest.raises(ValueError, match=f"D={D!r}"):
        variants.check_d(D)


def test_every_supported_d_passes():
    from kmeans_kernels import variants
    for D in range(16, 513, 16):
        variants.check_d(D)
    assert (kmeans_kernels.D_MULTIPLE, kmeans_kernels.D_MAX) == (16, 512)
