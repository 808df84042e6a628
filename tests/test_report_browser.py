"""The report opens in a real browser: every page loads, every figure is there, decoded and not blank.

Headless Chromium is driven through its DevTools protocol over a websocket (`websocket-client`, which
jupyter_server already depends on), so no chromedriver or selenium is needed. The report is served over
http://127.0.0.1:<free port> from a thread, as a user's browser would see it.

Two reports are checked: one rendered here from the committed notebooks (`--no-execute`, seconds; the
notebooks' own execution is tested by test_notebooks.py), and build/report/ when `make run` has written one.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from workbook import report

CHROMIUM = next(filter(None, (os.environ.get("CHROMIUM"), shutil.which("chromium"),
                              shutil.which("chromium-browser"), shutil.which("google-chrome"))), None)
websocket = pytest.importorskip("websocket", reason="websocket-client is needed to drive Chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: apt-get install -y chromium")

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--remote-debugging-port=0"]

# Resolves once every <img> has settled, then reports its decoded size and the variance of its pixels'
# luminance (drawn into a canvas; a blank or single-colour image has variance 0).
IMAGES_JS = """
(async () => {
  const imgs = [...document.images];
  await Promise.all(imgs.map(i => i.complete ? null : new Promise(r => { i.onload = i.onerror = r; })));
  return imgs.map(i => {
    const out = {src: i.getAttribute('src').slice(0, 60), width: i.naturalWidth, height: i.naturalHeight,
                 variance: 0};
    if (!i.naturalWidth) return out;
    const c = document.createElement('canvas');
    c.width = i.naturalWidth; c.height = i.naturalHeight;
    const g = c.getContext('2d');
    g.drawImage(i, 0, 0);
    const px = g.getImageData(0, 0, c.width, c.height).data;
    let n = 0, sum = 0, sq = 0;
    for (let k = 0; k < px.length; k += 4) {
      const y = 0.299 * px[k] + 0.587 * px[k + 1] + 0.114 * px[k + 2];
      n++; sum += y; sq += y * y;
    }
    out.variance = sq / n - (sum / n) ** 2;
    return out;
  });
})()
"""


class Browser:
    """Headless Chromium with one page, driven over the DevTools protocol."""

    def __init__(self, binary: str, timeout: float = 60):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="chromium-profile-")
        self.proc = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = self._devtools_port()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        # suppress_origin: Chromium refuses websocket clients that send an Origin it was not told to allow
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True)
        self._id = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable")

    def _devtools_port(self) -> int:
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Chromium exited with status {self.proc.returncode} at start")
            if port_file.exists() and port_file.read_text().strip():
                return int(port_file.read_text().split()[0])
            time.sleep(0.1)
        raise TimeoutError(f"Chromium did not open its DevTools port within {self.timeout} s")

    def call(self, method: str, **params) -> dict:
        """Send one command and return its result; events that arrive meanwhile are kept in self.events."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            self.events.append(msg)

    def wait_for(self, method: str) -> dict:
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            for i, ev in enumerate(self.events):
                if ev.get("method") == method:
                    return self.events.pop(i)
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(f"no {method} within {self.timeout} s")

    def open(self, url: str) -> None:
        self.events.clear()
        nav = self.call("Page.navigate", url=url)
        assert "errorText" not in nav, f"{url}: {nav['errorText']}"
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        res = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        assert "exceptionDetails" not in res, res["exceptionDetails"]
        return res["result"].get("value")

    def requests_elsewhere(self, origin: str) -> list[str]:
        """URLs requested since the last open() from anywhere but `origin` (data: and about: URLs fetch nothing).
        The browser's own favicon requests do not count: one for the page before (another test's server) can
        arrive after open()."""
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"
                and not e["params"]["request"]["url"].startswith((origin, "data:", "about:"))
                and not e["params"]["request"]["url"].endswith("/favicon.ico")]

    def problems(self, origin: str) -> list[str]:
        """JavaScript exceptions, dialogs (alert() and the like) and failed same-origin requests since the last
        open()."""
        urls = {e["params"]["requestId"]: e["params"]["request"]["url"]
                for e in self.events if e.get("method") == "Network.requestWillBeSent"
                and not e["params"]["request"]["url"].endswith("/favicon.ico")}   # the browser asks on its own
        found = []
        for ev in self.events:
            method, p = ev.get("method"), ev.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {p['exceptionDetails'].get('exception', {}).get('description', p)}")
            elif method == "Page.javascriptDialogOpening":
                found.append(f"dialog: {p.get('message')}")
            elif method == "Network.loadingFailed" and urls.get(p["requestId"], "").startswith(origin):
                found.append(f"failed: {urls[p['requestId']]} ({p.get('errorText')})")
            elif (method == "Network.responseReceived" and p["requestId"] in urls
                  and p["response"]["url"].startswith(origin) and p["response"]["status"] >= 400):
                found.append(f"HTTP {p['response']['status']}: {p['response']['url']}")
        return found

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            shutil.rmtree(self.profile, ignore_errors=True)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.imgs = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and "href" in a:
            self.hrefs.append(a["href"])
        if tag == "img":
            self.imgs.append(a.get("src"))


def _committed_report(out: Path) -> Path:
    report.build(report.notebooks(), out, run=False, progress=False)
    return out


@pytest.fixture(scope="module", params=["committed", "build/report"])
def served(request, tmp_path_factory):
    """(base URL, report folder) of a report served over HTTP from a thread."""
    if request.param == "committed":
        folder = _committed_report(tmp_path_factory.mktemp("report"))
    else:
        folder = report.REPORT
        if not (folder / "index.html").exists():
            pytest.skip("build/report/ has not been built (make run)")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", folder
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    b = Browser(CHROMIUM)
    yield b
    b.close()


def _check_images(browser: Browser, page: str, expected: int) -> None:
    images = browser.evaluate(IMAGES_JS)
    assert len(images) >= expected, f"{page}: {len(images)} <img>, expected at least {expected} figures"
    for img in images:
        assert img["width"] > 0 and img["height"] > 0, f"{page}: image did not load: {img['src']}"
        assert img["variance"] > 1.0, f"{page}: image is blank (luminance variance {img['variance']:.3g}): {img['src']}"


def test_index_lists_every_notebook_and_figure(served, browser):
    base, folder = served
    browser.open(f"{base}/index.html")
    assert browser.evaluate("document.title") == "Kernel workbook report"
    assert not browser.problems(base)
    assert browser.evaluate("document.querySelectorAll('td.fail').length") == 0, \
        browser.evaluate("[...document.querySelectorAll('td.fail')].map(td => td.title).join('; ')")

    links = _Links()
    links.feed((folder / "index.html").read_text(encoding="utf-8"))
    pages = {h for h in links.hrefs if h.endswith(".html")}
    if folder != report.REPORT:   # build/report/ may hold a subset: `python -m workbook.report 09`
        assert pages == {f"{p.stem}.html" for p in report.notebooks()}
    figures_on_disk = sorted(p.relative_to(folder).as_posix() for p in (folder / "figures").glob("*.png"))
    assert figures_on_disk and sorted(links.imgs) == figures_on_disk, "index thumbnails != figures/*.png"
    _check_images(browser, "index.html", len(figures_on_disk))


def test_every_notebook_page_loads_with_its_figures(served, browser):
    base, folder = served
    links = _Links()
    links.feed((folder / "index.html").read_text(encoding="utf-8"))
    pages = sorted(h for h in links.hrefs if h.endswith(".html"))
    assert pages
    for page in pages:
        browser.open(f"{base}/{page}")
        assert not browser.problems(base), page
        assert not browser.requests_elsewhere(base), f"{page} loads from elsewhere (a CDN?)"
        stem = page.removesuffix(".html")
        if folder != report.REPORT:   # the page renders the committed notebook: compare with it
            nb = nbformat.read(report.NOTEBOOKS / f"{stem}.ipynb", as_version=4)
            assert browser.evaluate("document.title") == report.title(nb, stem), page
            n_cells = browser.evaluate("document.querySelectorAll('.jp-Cell').length")
            assert n_cells == len(nb.cells), f"{page}: {n_cells} cells rendered, the notebook has {len(nb.cells)}"
        else:
            assert browser.evaluate("document.title"), f"{page} has no title"
        expected = len(list((folder / "figures").glob(f"{stem}_*.png")))
        _check_images(browser, page, expected)


def test_a_blank_figure_is_caught(tmp_path, browser):
    """The blank-image check must be able to fail: a single-colour PNG has zero variance."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(2, 2))
    fig.savefig(tmp_path / "blank.png")
    plt.close(fig)
    (tmp_path / "page.html").write_text("<!doctype html><title>t</title><img src='blank.png'>")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        browser.open(f"http://127.0.0.1:{server.server_address[1]}/page.html")
        with pytest.raises(AssertionError, match="blank"):
            _check_images(browser, "page.html", 1)
    finally:
        server.shutdown()
        server.server_close()


def test_a_failing_notebook_gets_a_red_row_and_its_traceback_page(tmp_path, browser):
    """make run keeps going past a broken notebook, shows where it broke, and exits non-zero."""
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
    value = random.randint(2, 10**6)
    good, bad = tmp_path / "01_good.ipynb", tmp_path / "02_bad.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# Good"), new_code_cell(
        f"import matplotlib.pyplot as plt\nplt.plot([0, {value}], [{value}, 0]);")]), good)
    nbformat.write(new_notebook(cells=[new_markdown_cell("# Bad"), new_code_cell(f"{value} / 0")]), bad)
    out = tmp_path / "report"
    entries = report.build([good, bad], out, progress=False)
    assert [e.error for e in entries] == [None, "ZeroDivisionError: division by zero"]
    assert len(entries[0].figures) == 1 and not entries[1].figures
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        browser.open(f"{base}/index.html")
        assert browser.evaluate("[...document.querySelectorAll('td.fail')].map(td => td.title)") == \
            ["ZeroDivisionError: division by zero"]
        _check_images(browser, "index.html", 1)
        browser.open(f"{base}/02_bad.html")
        assert "ZeroDivisionError" in browser.evaluate("document.body.innerText")
    finally:
        server.shutdown()
        server.server_close()


MATH_TYPESET_JS = """
(async () => {
  for (let i = 0; i < 200; i++) {
    const hub = window.MathJax && window.MathJax.Hub;
    if (hub && hub.queue && hub.queue.pending === 0 && hub.queue.running === 0
        && document.querySelectorAll('.MathJax, .MathJax_Display, .MathJax_SVG').length) return true;
    await new Promise(r => setTimeout(r, 100));
  }
  return false;
})()
"""


def test_a_hostile_notebook_runs_no_script_and_keeps_our_tables_figures_and_math(tmp_path, browser):
    """Scripts in markdown and in HTML outputs, event handlers, javascript: links, frames, JavaScript and SVG
    outputs: none may run, as JupyterLab treats an untrusted notebook; our table, figure, folded answer and
    math (MathJax from the report folder) still show, and nothing is fetched from elsewhere."""
    from test_report import hostile_notebook
    path = tmp_path / "01_hostile.ipynb"
    nbformat.write(hostile_notebook(), path)
    out = tmp_path / "report"
    report.build([path], out, run=False, progress=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        browser.open(f"{base}/01_hostile.html")
        if report.mathjax_source() is not None:
            assert browser.evaluate(MATH_TYPESET_JS), "MathJax did not typeset the page's math"
        browser.evaluate("document.getElementById('hover').dispatchEvent(new MouseEvent('mouseover'))")
        browser.evaluate("document.getElementById('jslink').click()")
        time.sleep(0.5)
        assert browser.evaluate("String(window.__pwned)") == "undefined"
        assert browser.evaluate("document.title") == "Hostile"
        # the hostile <img>s stay, without their onerror: their own 404s are the only problems allowed
        assert [p for p in browser.problems(base) if not re.search(r"https?://\S+/(x|nothing\.png)\b", p)] == []
        assert not browser.requests_elsewhere(base)
        assert browser.evaluate("document.querySelectorAll('iframe, object, embed').length") == 0
        assert browser.evaluate("document.querySelectorAll('table.dataframe th').length") == 2
        assert "the folded answer" in browser.evaluate("document.querySelector('details').textContent")
        drawn = [i for i in browser.evaluate(IMAGES_JS) if i["src"].startswith("data:")]
        assert len(drawn) == 2, drawn                    # our PNG figure and the (inert) SVG
        assert all(i["width"] > 0 and i["variance"] > 1.0 for i in drawn), drawn
    finally:
        server.shutdown()
        server.server_close()
