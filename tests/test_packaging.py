"""The install files: one home for every pin (pyproject.toml), no setuptools deprecation banner on install, and
`make lab` that starts as root."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import warnings

import pytest


from workbook import ROOT

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads TOML")
yaml = pytest.importorskip("yaml", reason="PyYAML (a jupyter dependency) reads environment.yml")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(spec: str) -> str:
    return re.split(r"[<>=!~ ;\[]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_installs_the_project_and_repeats_no_pin():
    """environment.yml and pyproject.toml used to disagree (torch==2.13.0 against torch>=2.5, Python 3.11 against
    >=3.10): the environment now installs the project with its [dev] extra, and its Python is the project's."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    project = _pyproject()["project"]
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == ["-e .[dev]"]
    python = next(d for d in conda if _name(d) == "python")
    assert python.removeprefix("python").replace(" ", "") == project["requires-python"].replace(" ", "")
    assert {_name(d) for d in conda} == {"python", "pip"}


def test_every_dependency_is_declared_once():
    project = _pyproject()["project"]
    names = [_name(d) for d in project["dependencies"] + project["optional-dependencies"]["dev"]]
    assert len(names) == len(set(names)), names
    assert "filelock" in {_name(d) for d in project["dependencies"]}            # workbook.records' lock
    assert "jupyter-server-mathjax" in {_name(d) for d in project["optional-dependencies"]["dev"]}   # the report


def test_no_setuptools_deprecation_banner():
    """`project.license` as a table made every install print a deprecation banner."""
    from setuptools.config import pyprojecttoml
    from setuptools.dist import Distribution
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pyprojecttoml.apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert not [str(w.message)[:200] for w in caught if "deprecat" in str(w.message).lower()]
    requires = _pyproject()["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in requires)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_passes_allow_root_only_as_root():
    out = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if "jupyter lab" in l)
    assert ("--allow-root" in line) == (os.geteuid() == 0), line
