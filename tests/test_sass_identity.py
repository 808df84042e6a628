"""tools/sass_identity.py: which variants it compiles, and how it tells two manifests apart (no compiles here)."""
import importlib.util

from workbook import ROOT

_spec = importlib.util.spec_from_file_location("sass_identity", ROOT / "tools" / "sass_identity.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def test_ids_cover_every_family_and_every_backend_variant():
    from kmeans_kernels import variants
    ids = tool.variants()
    families = {vid.split("/")[0] for vid in ids}
    assert families == {"kmeans-hopper", "kmeans-blackwell", "gemm-hopper", "gemm-blackwell"}
    for arch, family in (("sm_90a", "kmeans-hopper"), ("sm_100a", "kmeans-blackwell")):
        assert {vid.split("/")[1] for vid in ids if vid.startswith(family)} == set(variants.names(arch))
    hopper = [args["kw"] for kind, args in ids.values() if kind == "gemm-hopper"]
    for option in ("epilogue", "schedule", "cluster_m", "cluster_n", "dynamic", "defer_epilogue", "stream_k",
                   "narrow_ns", "trace", "tile", "stages"):
        assert any(option in kw for kw in hopper), option


def _manifest(commit, **variants):
    return {"meta": {"commit": commit}, "variants": variants}


def test_compare_counts_sass_differences_and_missing_ids(capsys):
    same = {"sass": "a" * 64, "ptx": "b" * 64, "sass_lines": 10}
    base = _manifest("base", x=same, y=same, z={"error": "ValueError: no"})
    assert tool.compare(base, _manifest("new", x=same, y=same, z={"error": "ValueError: no"})) == 0
    assert "SASS identical for 3" in capsys.readouterr().out
    changed = dict(same, sass="c" * 64)
    assert tool.compare(base, _manifest("new", x=same, y=changed, z={"error": "ValueError: no"})) == 1
    assert "SASS DIFFERS y" in capsys.readouterr().out
    assert tool.compare(base, _manifest("new", x=same, z={"error": "ValueError: no"})) == 1
    assert "only in base: y" in capsys.readouterr().out
    assert tool.compare(base, _manifest("new", x=same, y=same, z=same)) == 1      # a refusal became a build
