"""workbook.report without a browser: pages sanitized as JupyterLab shows an untrusted notebook, math served from
the report folder (no CDN anywhere), kernels over IPC. tests/test_report_browser.py opens the pages in Chromium."""
from __future__ import annotations

import base64
import re

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from workbook import report

# Every way we know for a notebook to run script in a page, each marked so a test can look for it.
HOSTILE_MARKDOWN = """# Hostile

<script>window.__pwned = 'markdown script'</script>
<img src="nothing.png" onerror="window.__pwned = 'markdown onerror'">
<a id="jslink" href="javascript:window.__pwned = 'markdown link'">a link</a>
<iframe src="data:text/html,<script>parent.__pwned = 'iframe'</script>"></iframe>
<details><summary>Solution</summary>the folded answer</details>

The score $s = \\frac{1}{2}\\|c_k\\|^2 - \\langle x_i, c_k \\rangle$ and `a < b` in code stay readable.
"""
HOSTILE_HTML = """<div id="ours-table"><style scoped>.dataframe td { color: #123456 }
@import url("http://127.0.0.1:9/evil.css"); .x { background: url(http://127.0.0.1:9/evil.png) }</style>
<table class="dataframe"><thead><tr><th>kernel</th><th style="text-align: right;">ms</th></tr></thead>
<tbody><tr><td>ours</td><td style="text-align: right;">0.123</td></tr></tbody></table></div>
<script>window.__pwned = 'html script'</script>
<img src="x" onerror="window.__pwned = 'html onerror'">
<div onmouseover="window.__pwned = 'handler'" id="hover">hover me</div>
<object data="data:text/html,<script>parent.__pwned = 'object'</script>"></object>"""
HOSTILE_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10" onload="window.__pwned = \'svg\'">'
               '<script>window.__pwned = "svg script"</script><rect width="5" height="10" fill="red"/></svg>')


def _png() -> str:
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1, 2], [2, 0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def hostile_notebook() -> nbformat.NotebookNode:
    code = new_code_cell("display(...)", outputs=[
        new_output("display_data", data={"text/html": HOSTILE_HTML, "text/plain": "<table>"}),
        new_output("display_data", data={"application/javascript": "window.__pwned = 'javascript output'",
                                         "text/plain": "<IPython.core.display.Javascript object>"}),
        new_output("display_data", data={"text/markdown": "**bold** <script>window.__pwned = 'md output'</script>",
                                         "text/plain": "md"}),
        new_output("display_data", data={"image/svg+xml": HOSTILE_SVG, "text/plain": "svg"}),
        new_output("display_data", data={"image/png": _png(), "text/plain": "<Figure>"}),
        new_output("display_data", data={"application/vnd.jupyter.widget-view+json":
                                         {"model_id": "abc", "version_major": 2, "version_minor": 0},
                                         "text/plain": "interactive(children=(IntSlider(value=5),))"}),
    ])
    nb = new_notebook(cells=[new_markdown_cell(HOSTILE_MARKDOWN), code])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2,
                                                                            "version_minor": 0}}
    return nb


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory):
    """(report folder, page HTML) of the hostile notebook, rendered by report.build with no execution."""
    folder = tmp_path_factory.mktemp("hostile")
    path = folder / "01_hostile.ipynb"
    nbformat.write(hostile_notebook(), path)
    out = folder / "report"
    with _quiet():
        report.build([path], out, run=False, progress=False)
    return out, (out / "01_hostile.html").read_text(encoding="utf-8")


def _quiet():
    import contextlib
    import warnings
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore", RuntimeWarning)     # no jupyter-server-mathjax here: math as TeX, said once
    return stack


def test_no_hostile_script_reaches_the_page(hostile_page):
    _, page = hostile_page
    assert "__pwned" not in page                      # no script, handler, frame or link survives
    assert "javascript:" not in page
    for tag in ("<iframe", "<object", "onerror=", "onmouseover=", "onload="):
        assert tag not in page, tag
    assert "evil.css" not in page and "evil.png" not in page                      # CSS fetches nothing


def test_our_tables_figures_and_folded_answers_still_show(hostile_page):
    out, page = hostile_page
    assert '<table class="dataframe">' in page and "<th>kernel</th>" in page
    assert 'style="text-align: right;"' in page and "color: #123456" in page
    assert "<details><summary>Solution</summary>the folded answer</details>" in page
    assert re.search(r'<img[^>]+src="data:image/png;base64,', page)
    assert (out / "figures" / "01_hostile_00.png").exists()
    assert "<code>a &lt; b</code>" in page                      # code spans are not mangled by the sanitizer
    assert "interactive(children=(IntSlider(value=5),))" in page   # a widget view falls back to its text


def test_clean_html_keeps_what_is_safe_and_drops_what_is_not():
    dirty = ('<p id="a" onclick="x()">hi <b>there</b></p><script>bad()</script><a href="https://example.org/x">ok</a>'
             '<a href="JavaScript:bad()">no</a><img src="data:image/png;base64,AAAA" alt="fig">'
             '<img src="http://127.0.0.1:9/track.png"><span style="color: red; behavior: url(x.htc)">c</span>')
    clean = report.clean_html(dirty)
    assert clean.startswith('<p id="a">hi <b>there</b></p>') and "bad()" not in clean
    assert '<a href="https://example.org/x">ok</a>' in clean and "<a>no</a>" in clean
    assert '<img alt="fig" src="data:image/png;base64,AAAA">' in clean and "track.png" not in clean
    assert '<span style="color: red;">c</span>' in clean


def test_our_own_html_outputs_keep_their_look():
    """workbook.stepper's coloured diff and the steps' checks: background, padding and border survive, any
    url() in a style does not."""
    diff = ("<div style='font-family:sans-serif;font-size:90%'><b>old</b> &rarr; <b>new</b></div>"
            "<pre style='line-height:1.25;font-size:85%;padding:.5em;border:1px solid #ddd'>"
            '<span style="background:#e6ffec;color:#116329">+ added</span></pre>'
            "<p style='color:#1a7f37'><b>Right.</b> well done</p>"
            '<span style="background: url(http://127.0.0.1:9/x.png) #fff">u</span>')
    clean = report.clean_html(diff)
    flat = clean.replace(" ", "")
    for kept in ("font-family:sans-serif", "padding:.5em", "border:1pxsolid#ddd", "background:#e6ffec",
                 "color:#116329", "color:#1a7f37", "\u2192"):
        assert kept in flat, kept
    assert "url(" not in clean and "127.0.0.1" not in clean and "background:#fff" in flat


CDN = re.compile(r"cdnjs|unpkg|jsdelivr|cdn\.|googleapis|mathjax\.org", re.IGNORECASE)
LOADS = re.compile(r"""(?:src|href)\s*=\s*["']?(https?:)?//|@import\s+url\(\s*["']?https?:|import\(\s*["']https?:""",
                   re.IGNORECASE)


def _loads_from_elsewhere(page: str) -> list[str]:
    """Absolute URLs the page would load (scripts, styles, images, modules); links in prose are not loads."""
    found = []
    for m in re.finditer(r"<(script|link|img|iframe|source|video|audio)\b[^>]*>", page, re.IGNORECASE):
        if re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", m.group(0), re.IGNORECASE):
            found.append(m.group(0)[:120])
    found += [m.group(0) for m in re.finditer(r"""@import\s+url\(\s*["']?https?:[^)]*\)|import\(\s*["']https?:[^)]*\)""",
                                               page, re.IGNORECASE)]
    return found


def test_no_page_references_a_cdn(tmp_path):
    """The committed notebooks' report: no script, style, font or module from a CDN (MathJax included)."""
    with _quiet():
        report.build(report.notebooks(), tmp_path, run=False, progress=False)
    pages = sorted(tmp_path.glob("*.html"))
    assert len(pages) == len(report.notebooks()) + 1
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert not CDN.search(text), f"{page.name} names a CDN: {CDN.search(text).group(0)}"
        assert not _loads_from_elsewhere(text), f"{page.name} loads {_loads_from_elsewhere(text)}"


def test_math_is_served_from_the_report_folder(tmp_path):
    pytest.importorskip("jupyter_server_mathjax", reason="jupyter-server-mathjax ships MathJax (the [dev] extra)")
    nb = tmp_path / "01_math.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# Math\n\n$x^2$")]), nb)
    report.build([nb], tmp_path / "report", run=False, progress=False)
    page = (tmp_path / "report" / "01_math.html").read_text(encoding="utf-8")
    src = re.search(r'<script src="([^"]*MathJax\.js[^"]*)"', page).group(1)
    assert src.startswith(f"{report.MATHJAX_DIR}/MathJax.js?config=")
    assert (tmp_path / "report" / report.MATHJAX_DIR / "MathJax.js").exists()


def test_without_mathjax_the_report_says_so_and_loads_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "mathjax_source", lambda: None)
    nb = tmp_path / "01_math.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# Math\n\n$x^2$")]), nb)
    with pytest.warns(RuntimeWarning, match="jupyter-server-mathjax"):
        report.build([nb], tmp_path / "report", run=False, progress=False)
    page = (tmp_path / "report" / "01_math.html").read_text(encoding="utf-8")
    assert "MathJax.js" not in page and "$x^2$" in page


@pytest.mark.slow
def test_kernels_run_over_ipc_without_the_tcp_warning(tmp_path, capfd):
    """ipykernel warns 'running over TCP without encryption' at every start over TCP: eleven times a report."""
    nb = tmp_path / "01_tiny.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("print(6 * 7)")]), nb)
    ran = report.execute(nb, timeout=120)
    assert ran.cells[0].outputs[0]["text"].strip() == "42"
    captured = capfd.readouterr()
    assert "without encryption" not in captured.err + captured.out


def test_notebooks_are_selected_by_any_of_several_patterns():
    every = report.notebooks()
    assert every and report.notebooks("") == every
    first, last = every[0].name[:2], every[-1].name[:2]
    assert report.notebooks(first, last) == [every[0], every[-1]]
    assert report.notebooks("no such notebook") == []
    assert report.main(["no such notebook", "--no-execute"]) == 2
