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
    _pretend_gpu(monkeypatch)
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


def _pretend_gpu(monkeypatch):
    """Pretend every tensor is on GPU 0, so that the kernel-only checks, and the shortcut that accepts valid calls
    before them (`kmeans_kernels._accepts`), are reached on a CPU: each refusal below is also a case the shortcut
    must decline."""
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda", 0)))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 0)


@pytest.fixture
def on_gpu(monkeypatch):
    _pretend_gpu(monkeypatch)


def test_the_shortcut_accepts_valid_calls_and_declines_each_broken_precondition(on_gpu):
    x, c = _xc(N=8, D=64, K=4)
    c_sq, out = torch.ones(4), torch.empty(8, dtype=torch.int32)
    assert kmeans_kernels._accepts(x, c, None, None) and kmeans_kernels._accepts(x, c, c_sq, out)
    assert kmeans_kernels._accepts(x.half(), c.half(), c_sq, out)
    assert kmeans_kernels._accepts(x, c, torch.ones(8)[1:5], None)       # 4-byte aligned is enough for c_sq
    broken = [(x.float(), c.float(), None, None), (x, c.half(), None, None), (x[:, :48], c[:, :48], None, None),
              (x, c[:, :32], None, None), (x.t().contiguous().t(), c, None, None), (_misaligned(8, 64, x.dtype), c, None, None),
              (x, c, c_sq.double(), None), (x, c, torch.ones(5), None), (x, c, None, out.long()),
              (x, c, None, torch.empty(9, dtype=torch.int32)), (x, c, c_sq[:0], None),
              (x, c, torch.ones(8)[::2], None), (x, c, None, torch.empty(16, dtype=torch.int32)[::2]),
              (x[0], c, None, None), (x, c, c_sq.numpy(), None)]
    for i, args in enumerate(broken):
        assert not kmeans_kernels._accepts(*args), i
        with pytest.raises(ValueError):
            kmeans_kernels.check_inputs(*args)


def _misaligned(rows, cols, dtype, elements_in=1):
    """A row-major [rows, cols] view that starts `elements_in` elements into a fresh buffer."""
    buffer = torch.zeros(rows * cols + 16, dtype=dtype)
    return buffer[elements_in:elements_in + rows * cols].view(rows, cols)


@pytest.mark.parametrize("which", ["x", "c"])
def test_a_view_that_is_not_16_byte_aligned_is_refused_for_every_backend(on_gpu, which):
    """TMA reads x and c: one check in check_inputs, before any backend (Blackwell trusted assumed_align=16)."""
    x, c = _xc(N=8, D=64, K=4)
    bad = _misaligned(*(x if which == "x" else c).shape, torch.bfloat16)
    assert bad.is_contiguous() and bad.data_ptr() % 16
    args = (bad, c) if which == "x" else (x, bad)
    with pytest.raises(ValueError, match=f"{which} must start on a 16-byte boundary"):
        kmeans_kernels.check_inputs(*args, None, None)


def test_misaligned_c_sq_and_out_are_refused(on_gpu):
    x, c = _xc(N=8, D=64, K=4)
    raw = bytearray(64)                    # torch's own views keep element alignment; a foreign buffer need not
    c_sq = torch.frombuffer(raw, dtype=torch.float32, offset=1, count=4)
    with pytest.raises(ValueError, match="c_sq must start on a 4-byte boundary"):
        kmeans_kernels.check_inputs(x, c, c_sq, None)
    out = torch.frombuffer(raw, dtype=torch.int32, offset=1, count=8)
    with pytest.raises(ValueError, match="out must start on a 4-byte boundary"):
        kmeans_kernels.check_inputs(x, c, None, out)


def test_non_contiguous_c_sq_and_out_say_so(on_gpu):
    """Not only the dtype: the message names what is wrong (contiguity) and shows the strides."""
    x, c = _xc(N=8, D=64, K=4)
    c_sq = torch.ones(8, dtype=torch.float32)[::2]
    with pytest.raises(ValueError, match=r"c_sq must be contiguous.*strides \(2,\)"):
        kmeans_kernels.check_inputs(x, c, c_sq, None)
    out = torch.empty(16, dtype=torch.int32)[::2]
    with pytest.raises(ValueError, match=r"out must be contiguous.*strides \(2,\)"):
        kmeans_kernels.check_inputs(x, c, None, out)
    with pytest.raises(ValueError, match="float32"):
        kmeans_kernels.check_inputs(x, c, torch.ones(4, dtype=torch.float16), None)


@pytest.mark.parametrize("which", ["N", "K"])
def test_sizes_past_32_bits_are_refused(on_gpu, which):
    """The kernels index rows with 32-bit integers: N >= 2^31 (64 GiB of x at D=16, which an H200 holds) used to
    pass cutlass.Int32 and wrap."""
    big = torch.zeros(1, 16, dtype=torch.bfloat16).expand(2**31, 16)   # no memory behind it
    small = torch.zeros(4, 16, dtype=torch.bfloat16)
    x, c = (big, small) if which == "N" else (small, big)
    with pytest.raises(ValueError, match=f"{which}=2147483648 is too large.*32-bit"):
        kmeans_kernels.check_inputs(x, c, None, None)
    edge = torch.zeros(1, 16, dtype=torch.bfloat16).expand(kmeans_kernels.MAX_ROWS + 1, 16)
    with pytest.raises(ValueError, match="too large"):
        kmeans_kernels.check_inputs(*((edge, small) if which == "N" else (small, edge)), None, None)


@pytest.mark.parametrize("sizes, match", [
    (dict(N=128, D=16.0, K=128), r"D must be an int, got 16\.0"),
    (dict(N=128.0, D=64, K=128), "N must be an int"),
    (dict(N=128, D=64, K="128"), "K must be an int"),
    (dict(N=True, D=64, K=128), "N must be an int"),
    (dict(N=0, D=64, K=128), "N must be >= 1"),
    (dict(N=2**31, D=64, K=128), "too large"),
])
def test_compile_assign_refuses_sizes_it_cannot_take_before_compiling(sizes, match, monkeypatch):
    """compile_assign(D=16.0) used to fail deep inside CuTe; it must fail at once, naming the size."""
    from kmeans_kernels import hopper
    monkeypatch.setattr(hopper, "compile", lambda *a, **k: pytest.fail("reached the compiler"))
    with pytest.raises(ValueError, match=match):
        kmeans_kernels.compile_assign("serial", arch="sm_90a", **sizes)


def test_one_vocabulary_says_what_each_variant_is_made_of():
    from kmeans_kernels import blackwell, hopper, variants
    # the same name, two recipes: on Blackwell each step is one change from the serial baseline
    assert variants.recipe("sm_90a", "norm_broadcast").scan == "ilp2"
    assert variants.recipe("sm_100a", "norm_broadcast").scan == "serial"
    assert hopper.VARIANTS == variants.names("sm_90a") and blackwell.VARIANTS == variants.names("sm_100a")
    for name, spec in hopper.VARIANT_SPECS.items():
        r = variants.recipe("sm_90a", name)
        assert (spec.scan, spec.norms, spec.block_n, spec.ping_pong) == (r.scan, r.norms, r.tile_n, r.ping_pong)
    for name, design in blackwell.DESIGNS.items():
        r = variants.recipe("sm_100a", name)
        assert (design.reduction, design.norms, design.warp_specialized) == (r.scan, r.norms, r.warp_specialized)
    table = variants.table()
    assert len(table) == 12 and set(table.arch) == {"sm_90a", "sm_100a"}
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


class _FakeBackend:
    """A backend that launches nothing: it records which launchers `assign` asked for and which calls ran."""
    VARIANTS = ("serial", "lean_select")

    def __init__(self):
        self.launchers, self.launched = [], []

    def auto_variant(self, N, D, K):
        return "lean_select"

    def launcher(self, variant, N, D, K, dtype, device):
        self.launchers.append((variant, N, D, K, dtype, device))
        return lambda x, c, c_sq, out: self.launched.append((variant, x, c, c_sq, out))


@pytest.fixture
def fake_backend(on_gpu, monkeypatch):
    be = _FakeBackend()
    monkeypatch.setattr(kmeans_kernels, "arch_of", lambda device: "sm_90a")
    monkeypatch.setattr(kmeans_kernels, "backend", lambda arch: be)
    kmeans_kernels._signatures.clear()
    yield be
    kmeans_kernels._signatures.clear()     # no remembered call of a fake backend outlives the test


def test_assign_checks_a_signature_once_and_still_refuses_each_broken_call_of_it(fake_backend, monkeypatch):
    x, c = _xc(N=8, D=64, K=4)
    c_sq = torch.ones(4)
    first = kmeans_kernels.assign(x, c, c_sq=c_sq)
    assert fake_backend.launchers == [("lean_select", 8, 64, 4, torch.bfloat16, 0)]
    full, checks = [], kmeans_kernels.check_inputs
    monkeypatch.setattr(kmeans_kernels, "check_inputs", lambda *args: (full.append(args), checks(*args)))
    x2, c2 = _xc(N=8, D=64, K=4)
    out = torch.full((8,), 7, dtype=torch.int32)
    second = kmeans_kernels.assign(x2, c2, c_sq=c_sq)
    assert kmeans_kernels.assign(x2, c2, c_sq=c_sq, out=out) is out
    assert full == [] and len(fake_backend.launchers) == 1          # remembered: no checks, no look-up
    assert second.dtype == torch.int32 and second.shape == (8,) and second.data_ptr() != first.data_ptr()
    assert [call[1:] for call in fake_backend.launched[1:]] == [(x2, c2, c_sq, second), (x2, c2, c_sq, out)]
    launched = len(fake_backend.launched)
    # each of one remembered signature (shapes, dtype, device, variant), each broken in what the signature leaves open
    broken = [(x.t().contiguous().t(), c, c_sq, None), (_misaligned(8, 64, x.dtype), c, c_sq, None),
              (x, _misaligned(4, 64, c.dtype), c_sq, None), (x, c, c_sq.double(), None), (x, c, torch.ones(5), None),
              (x, c, torch.ones(8)[::2], None), (x, c, c_sq.numpy(), None), (x, c, c_sq, out.long()),
              (x, c, c_sq, torch.empty(9, dtype=torch.int32)), (x, c, c_sq, torch.empty(16, dtype=torch.int32)[::2])]
    for i, (bx, bc, bsq, bout) in enumerate(broken):
        with pytest.raises(ValueError):
            kmeans_kernels.assign(bx, bc, c_sq=bsq, out=bout)
        assert len(fake_backend.launched) == launched and len(full) == i + 1, i   # declined, then fully checked


def test_assign_remembers_each_variant_of_a_signature_apart(fake_backend):
    x, c = _xc(N=8, D=64, K=4)
    for variant in ("auto", "serial", "auto", "serial"):
        kmeans_kernels.assign(x, c, variant=variant, c_sq=torch.ones(4))
    assert [v for v, *_ in fake_backend.launchers] == ["lean_select", "serial"]
    assert [v for v, *_ in fake_backend.launched] == ["lean_select", "serial", "lean_select", "serial"]
    with pytest.raises(ValueError, match="'nope' does not exist"):
        kmeans_kernels.assign(x, c, variant="nope", c_sq=torch.ones(4))
    assert len(kmeans_kernels._signatures) == 2


def test_assign_without_c_sq_launches_the_norms_into_a_fresh_float32_k_before_the_kernel(fake_backend, monkeypatch):
    """The norms come from one launch of `kmeans_kernels.norms` (looked up once per signature), not the reference."""
    from kmeans_kernels import norms
    asked, ran = [], []

    def launcher(D, dtype, arch, device):
        asked.append((D, dtype, arch, device))
        return lambda c, c_sq: ran.append((c, c_sq))
    monkeypatch.setattr(norms, "launcher", launcher)
    monkeypatch.setattr(kmeans_kernels.reference, "centroid_norms", lambda c: pytest.fail("the reference ran"))
    x, c = _xc(N=8, D=64, K=4)
    kmeans_kernels.assign(x, c)
    kmeans_kernels.assign(x, c)
    given = torch.ones(4)
    kmeans_kernels.assign(x, c, c_sq=given)
    assert asked == [(64, torch.bfloat16, "sm_90a", 0)]
    assert len(ran) == 2 and all(got is c for got, _ in ran)
    for (_, c_sq), (*_, launched_sq, _) in zip(ran, fake_backend.launched):
        assert launched_sq is c_sq and c_sq.dtype == torch.float32 and c_sq.shape == (4,) and c_sq.is_contiguous()
    assert fake_backend.launched[2][3] is given


def test_the_lazy_scan_needs_the_norms_in_the_accumulator():
    from kmeans_kernels import variants
    with pytest.raises(ValueError, match="norms in the accumulator"):
        variants.Recipe("lazy", "shuffle")
    assert variants.recipe("sm_90a", "lazy_index") == variants.Recipe("lazy", "accumulator", ping_pong=True)
