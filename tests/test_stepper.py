"""workbook.stepper: loading step files by path (fresh each time), editable copies, diffs, excerpts, SASS deltas."""
from __future__ import annotations

import random
import sys
import textwrap

import pytest

from workbook import sass, stepper

STEP = textwrap.dedent('''\
    """A step: the docstring says what changed.

    More prose.
    """
    SIZE = 128


    @staticmethod
    def helper(a,
               b):
        """Adds."""
        total = a + b

        return total


    def other():
        return SIZE
    ''')


@pytest.fixture
def step_file(tmp_path):
    path = tmp_path / "step_demo.py"
    path.write_text(STEP)
    return path


def test_load_by_path_is_fresh_every_time(step_file):
    first = stepper.load(step_file)
    assert first.SIZE == 128 and first.__name__ in sys.modules
    step_file.write_text(STEP.replace("SIZE = 128", "SIZE = 64"))
    second = stepper.load(str(step_file))
    assert second.SIZE == 64 and first.SIZE == 128 and second.__name__ != first.__name__
    assert stepper.load(second) is second                  # a module is taken as is
    assert stepper.load("workbook.sass") is sass            # a dotted name is imported


def test_load_refuses_what_is_not_a_python_file(tmp_path):
    with pytest.raises(ValueError, match="no Python file"):
        stepper.load(tmp_path / "missing.py")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('edited badly')\n")
    with pytest.raises(RuntimeError, match="edited badly"):
        stepper.load(broken)
    assert not [m for m in sys.modules if m.startswith("_workbook_step_broken")]


def test_load_keeps_the_source_readable_for_the_dsl(step_file):
    import inspect
    module = stepper.load(step_file)
    assert "total = a + b" in inspect.getsource(module.other.__globals__["helper"].__func__)


def test_copy_for_editing_keeps_edits(step_file, tmp_path):
    module = stepper.load(step_file)
    dest = stepper.copy_for_editing(module, tmp_path / "mine")
    assert dest.read_text() == STEP and dest.parent.name == "mine"
    dest.write_text("# my edit\n" + STEP)
    assert stepper.copy_for_editing(module, tmp_path / "mine").read_text().startswith("# my edit")
    assert stepper.copy_for_editing(module, tmp_path / "mine", overwrite=True).read_text() == STEP


def test_diff_text_html_and_counts(step_file, tmp_path):
    rng = random.Random()
    size = rng.choice([32, 64, 256])
    new = tmp_path / "step_next.py"
    new.write_text(STEP.replace("SIZE = 128", f"SIZE = {size}").replace("more prose", "x"))
    d = stepper.diff(step_file, new)
    assert (d.added, d.removed) == (1, 1)
    text = str(d)
    assert "-SIZE = 128" in text and f"+SIZE = {size}" in text and "step_demo.py" in text
    page = d._repr_html_()
    assert "#e6ffec" in page and "#ffebe9" in page and "1 lines added, 1 removed" in page
    same = stepper.diff(step_file, step_file)
    assert same.lines == [] and "identical" in str(same)


def test_diff_can_leave_the_docstrings_out(step_file, tmp_path):
    new = tmp_path / "step_next.py"
    new.write_text(STEP.replace("More prose.", "Other prose, longer.\nAnd more."))
    assert stepper.diff(step_file, new).added == 2
    assert stepper.diff(step_file, new, module_docstring=False).lines == []
    assert stepper.strip_module_docstring(STEP).startswith("SIZE = 128")


def test_diff_of_source_text():
    d = stepper.diff("a = 1\nb = 2\n", "a = 1\nb = 3\n")
    assert d.added == d.removed == 1 and "<text>" in str(d)


def test_excerpt_of_a_block_and_of_a_range(step_file):
    block = stepper.excerpt(step_file, "@staticmethod")
    assert block.lines[0] == "@staticmethod" and block.lines[-1] == "    return total"
    assert block.first_line == 8 and "def other" not in block.text
    assert str(block).splitlines()[0] == " 8  @staticmethod"
    assert "total" in block._repr_html_() and "lines 8-14" in block._repr_html_()
    span = stepper.excerpt(step_file, "def other", "return SIZE")
    assert span.lines == ["def other():", "    return SIZE"]
    with pytest.raises(ValueError, match="does not occur"):
        stepper.excerpt(step_file, "def nowhere")
    with pytest.raises(ValueError, match="after"):
        stepper.excerpt(step_file, "def other", "SIZE = 128")


def test_sass_delta_on_the_demo_kernel():
    import torch
    from cutlass.cute.runtime import from_dlpack
    a = from_dlpack(torch.zeros(256, dtype=torch.float32))
    from workbook.primer.vector_add import vector_add
    art = sass.compile_for(vector_add, a, a, a, arch="sm_90a")
    fake_new = art.sass + "\n        /*ffff*/                   SHFL.IDX R1, R2, R3, R4 ;\n"
    df = stepper.sass_delta(art.sass, fake_new)
    assert list(df.columns) == ["old", "new", "change"]
    assert df.loc["SHFL"].tolist() == [0, 1, 1] and df.index[0] == "SHFL"     # the largest change first
    assert (df.drop("SHFL")["change"] == 0).all()
    assert list(stepper.sass_delta(art.sass, fake_new, changed_only=True).index) == ["SHFL"]
    assert "SHFL.IDX" in stepper.sass_delta(art.sass, fake_new, base=False).index
    part = sass.instructions(fake_new)[-1:]                  # a list of instructions: part of a kernel
    assert stepper.sass_delta([], part).loc["SHFL"].tolist() == [0, 1, 1]
