"""Run the lab's notebooks as a participant does: JupyterLab in headless Chromium, Run All Cells.

    python scripts/browser_lab.py [00 01 07 | all] [--mode small] [--shots reports/browser] [--solutions]

JupyterLab starts through scripts/jupyter_lab.py (what `make jupyter` runs) on a free local
port; Debian's ``chromium`` and ``chromium-driver`` are driven with selenium (never a
downloaded browser). For each notebook: open it, Run All Cells from the Run menu, wait for an
idle kernel, then read what the page shows: code cells that ran, error and stderr outputs,
images that did not load, files written outside ``reports/`` and ``data/`` or under the
server's own ``$HOME`` (a fresh folder; :data:`HOME_CACHES` lists what the lab may leave there).
With ``--solutions`` the exercise solutions (the fenced python blocks of each
``<details><summary>Solution</summary>`` cell) are then appended as new cells in the browser,
never saved, and run and checked the same way. tests/test_browser.py asserts on what
:func:`run_notebook` returns.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import jupyter_lab  # scripts/ is on sys.path: run as a script, or from tests (as run_lab is)

ROOT = jupyter_lab.ROOT
CHROMIUM = ("chromium", "chromium-browser")
CHROMEDRIVER = ("chromedriver",)
# Root in a container: no sandbox; no GPU, no network chatter, a fresh profile each time.
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,900")
# JupyterLab would autosave the executed notebook over the committed one (outputs and all).
# The news pop-up would cover the screenshots.
# What the lab leaves under $HOME, each for a reason; anything else there is a finding.
HOME_CACHES = {
    ".cache/labkit": "converted models (ONNX, INT8, TensorRT engines) and nsys exports, reused across runs",
    ".cache/matplotlib": "matplotlib's font list, built once",
    ".config/matplotlib": "matplotlib's configuration folder, created empty",
    ".local/share/jupyter": "Jupyter's connection files (runtime/; a server stopped by a signal without a "
                            "terminal leaves them) and notebook trust database (nbsignatures.db, notebook_secret)",
    ".ipython/profile_default": "IPython's input history of the kernels (history.sqlite)",
    ".cache/Microsoft": "ONNX Runtime's device id and usage database (.onnxruntime/), written on import",
}
# Folders a run may write in the checkout: its reports and the sample video; git's, pytest's
# and the venv's own are not the lab's.
ALLOWED = ("reports", "data", ".git", ".venv", ".pytest_cache")
LAB_SETTINGS = {"@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
                "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"}}


def missing() -> str | None:
    """Why the browser run cannot happen here (None when it can)."""
    for names, fix in ((CHROMIUM, "apt-get install chromium"), (CHROMEDRIVER, "apt-get install chromium-driver")):
        if not any(shutil.which(n) for n in names):
            return f"{names[0]} not found: {fix}"
    for mod, fix in (("selenium", "pip install -e '.[test]'"), ("jupyterlab", "pip install -e '.[jupyter]'")):
        try:
            __import__(mod)
        except ImportError:
            return f"{mod} not installed: {fix}"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    """A running JupyterLab: its address, token and process."""

    port: int
    token: str
    proc: subprocess.Popen
    log: Path
    home: Path  # $HOME of the server and its kernels: what the lab writes there shows

    def api(self, path: str):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/{path}?token={self.token}", timeout=10) as r:
            return json.load(r)

    def shut_down(self, name: str) -> None:
        """End the kernels of ``name``'s sessions (each notebook's kernel would otherwise stay)."""
        for s in self.api("sessions"):
            if s.get("path", "").endswith(name):
                req = urllib.request.Request(f"http://127.0.0.1:{self.port}/api/sessions/{s['id']}?token={self.token}",
                                             method="DELETE")
                urllib.request.urlopen(req, timeout=30).close()

    def url(self, path: str) -> str:
        return jupyter_lab.url(port=self.port, ip="127.0.0.1", token=self.token, path=path)


@contextlib.contextmanager
def serve(*, mode: str = "small", reports: Path, notebook_dir: Path = jupyter_lab.NOTEBOOKS, timeout: float = 120):
    """JupyterLab on a free local port, started as `make jupyter` starts it, with the runs'
    reports under ``reports``, a fresh workspace and settings folder (no autosave) and a fresh
    ``$HOME`` whose ``.cache/labkit`` is the user's own (converted models are reused)."""
    tmp = Path(tempfile.mkdtemp(prefix="labkit-jlab-"))
    for name, value in LAB_SETTINGS.items():
        (tmp / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "settings" / name).write_text(json.dumps(value))
    home = tmp / "home"
    (home / ".cache").mkdir(parents=True)
    (Path.home() / ".cache" / "labkit").mkdir(parents=True, exist_ok=True)
    (home / ".cache" / "labkit").symlink_to(Path.home() / ".cache" / "labkit")
    port, token = free_port(), os.urandom(16).hex()
    env = jupyter_lab.lab_env(mode=mode, token=token)
    env.update(LABKIT_REPORTS=str(reports), HOME=str(home))
    # The app object in the page (window.jupyterapp) is how solutions are added as cells
    # without touching the file. Checkpoints go where the launcher puts them (under reports).
    extra = [f"--LabApp.user_settings_dir={tmp / 'settings'}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
             "--LabApp.expose_app_in_browser=True"]
    log = tmp / "jupyterlab.log"
    argv = jupyter_lab.command(port=port, notebook_dir=notebook_dir,
                               checkpoints=jupyter_lab.checkpoints_dir(env), extra=extra)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
    lab = Lab(port, token, proc, log, home)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                lab.api("status")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start (exit {proc.poll()}):\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield lab
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def chromium():
    """A selenium driver of Debian's headless chromium with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="labkit-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = next(shutil.which(n) for n in CHROMIUM if shutil.which(n))
    for flag in CHROME_FLAGS + (f"--user-data-dir={profile}",):
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service(shutil.which(CHROMEDRIVER[0])))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@dataclass
class Outcome:
    """What the page showed after Run All: one entry per problem, empty lists when clean."""

    notebook: str
    seconds: float
    code_cells: int
    not_run: list[int] = field(default_factory=list)  # 1-based code-cell numbers without an execution count
    errors: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    broken_images: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)  # files and folders written outside reports/, data/
    home_written: list[str] = field(default_factory=list)  # under $HOME, outside HOME_CACHES
    solution_cells: int = 0  # code cells appended from the solutions (the last ones)
    timed_out: bool = False
    hover: str = ""  # what the first interactive (Bokeh) timeline's hover showed over its widest bar

    @property
    def clean(self) -> bool:
        return not (self.not_run or self.errors or self.stderr or self.broken_images or self.written
                    or self.home_written or self.timed_out or not self.code_cells)


# Reads the visible notebook. JupyterLab 4 windows its cells with content-visibility, so text
# comes from textContent (innerText is empty off-screen).
_READ = """
const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
if (!nb) return null;
const cells = [...nb.querySelectorAll('.jp-CodeCell')];
const text = (sel) => [...nb.querySelectorAll(sel)].map(e => e.textContent.trim().slice(0, 2000));
// JupyterLab renders a traceback with the stderr mime type too; its first line is a rule of dashes
const stderr = text('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]');
const isError = (s) => /^-{20,}/.test(s) || s.includes('Traceback (most recent call last)');
return {
  prompts: cells.map(c => (c.querySelector('.jp-InputArea-prompt') || {textContent: ''}).textContent.trim()),
  errors: stderr.filter(isError),
  stderr: stderr.filter(s => !isError(s)),
  images: [...nb.querySelectorAll('.jp-OutputArea-output img')].map(
      i => [i.complete && i.naturalWidth > 0, (i.getAttribute('src') || '').slice(0, 60)]),
};
"""


_SOLUTION = re.compile(r"<details>\s*<summary>\s*Solution\s*</summary>(.*?)</details>", re.S)
_FENCE = re.compile(r"```python\n(.*?)```", re.S)


def solutions(path: Path) -> list[str]:
    """The code of an exercise solution, block by block: each fenced python block inside a
    ``<details><summary>Solution</summary>`` markdown cell, in notebook order."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return [code.strip() for c in nb.cells if c.cell_type == "markdown"
            for block in _SOLUTION.findall(c.source) for code in _FENCE.findall(block)]


# Appends cells to the open notebook's model (not the file: autosave is off) and runs them.
_APPEND_AND_RUN = """
const [path, sources] = arguments;
const app = window.jupyterapp;
const panel = [...app.shell.widgets('main')].find(w => w.context && w.context.path === path);
if (!panel) return null;
app.shell.activateById(panel.id);
const nb = panel.content, start = nb.model.cells.length;
nb.model.sharedModel.insertCells(start, sources.map(s => ({cell_type: 'code', source: s, metadata: {}})));
nb.activeCellIndex = start;
nb.deselectAll();
app.commands.execute('notebook:run-all-below');
return start;
"""


def snapshot(root: Path, *, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root`` (not following links) with its mtime and size, the
    top-level folders in ``skip`` and Python's bytecode caches left out."""
    snap = {}
    for dirpath, dirnames, files in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and not (not rel.parts and d in skip)]
        for name in dirnames + files:
            st = (Path(dirpath) / name).lstat()
            snap[str(rel / name) + ("/" if name in dirnames else "")] = (st.st_mtime_ns, st.st_size)
    return snap


def changed(before: dict, after: dict, *, allowed: tuple[str, ...] = ()) -> list[str]:
    """Paths new, changed or gone between two snapshots, those under ``allowed`` prefixes left out."""
    keys = {k for k in after.keys() | before.keys() if before.get(k) != after.get(k)}
    # a folder's mtime changes when a file in it does: the file is the finding, not the folder
    keys = {k for k in keys if not (k.endswith("/") and k in before and k in after)}
    inside = [a.rstrip("/") + "/" for a in allowed]
    # a new folder on the way to an allowed one (.config/ for .config/matplotlib/) is allowed too
    return sorted(k for k in keys if not any(k.startswith(a) or (k.endswith("/") and a.startswith(k)) for a in inside))


def _read(driver) -> dict | None:
    return driver.execute_script(_READ)


# The first Bokeh figure with bars (labkit's interactive timeline): scroll it into view and give
# the viewport position of its widest bar's middle.
_BAR = """
if (!window.Bokeh || !Bokeh.index) return null;
for (const v of Object.values(Bokeh.index)) {
  const r = (v.model.renderers || []).find(r => r.data_source && r.data_source.data && r.data_source.data.left);
  if (!r || !v.frame) continue;
  const d = r.data_source.data, x0 = v.frame.x_range.start, x1 = v.frame.x_range.end;
  let best = -1, width = -1;
  for (let i = 0; i < d.left.length; i++) {
    const w = Math.min(d.right[i], x1) - Math.max(d.left[i], x0);
    if (w > width) { width = w; best = i; }
  }
  if (best < 0) return null;
  v.el.scrollIntoView({block: 'center'});
  const box = v.canvas_view.el.getBoundingClientRect();
  const x = (Math.max(d.left[best], x0) + Math.min(d.right[best], x1)) / 2;
  return [box.left + v.frame.x_scale.compute(x), box.top + v.frame.y_scale.compute(d.y[best])];
}
return null;
"""
# The text of the tooltips shown (BokehJS draws them inside shadow roots).
_TOOLTIP = """
const out = [];
const walk = (n) => {
  if (!n) return;
  if (n.classList && n.classList.contains('bk-tooltip-content')) out.push(n.innerText || n.textContent);
  if (n.shadowRoot) walk(n.shadowRoot);
  for (const c of n.children || []) walk(c);
};
walk(document.body);
return out.join('\\n');
"""


def hover_timeline(driver) -> str:
    """Move the mouse over the widest bar of the page's first interactive timeline and return the
    text its hover shows ('' when there is no such figure or no tooltip)."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    spot = driver.execute_script(_BAR)
    if not spot:
        return ""
    time.sleep(0.5)
    spot = driver.execute_script(_BAR)  # after the scroll
    for dx in (0, 1, -1):  # a first move can land before the figure listens
        ab = ActionBuilder(driver)
        ab.pointer_action.move_to_location(int(spot[0]) + dx, int(spot[1]))
        ab.perform()
        time.sleep(1.0)
        text = driver.execute_script(_TOOLTIP)
        if text.strip():
            return text.strip()
    return ""


def _scroll_through(driver) -> None:
    """Scroll the notebook to its end in steps, so windowed cells render their images; end on
    the last output (what the screenshot shows)."""
    driver.execute_script("""
      const o = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
      if (o) { o.scrollTop = 0; }""")
    for _ in range(200):
        if driver.execute_script("""
          const o = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
          if (!o) return true;
          const before = o.scrollTop; o.scrollTop += o.clientHeight; return o.scrollTop === before;"""):
            break
        time.sleep(0.2)
    driver.execute_script("""
      const outs = document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output');
      if (outs.length) { outs[outs.length - 1].scrollIntoView({block: 'end'}); }""")
    time.sleep(1.0)


def small_png(path: Path, colors: int = 64) -> None:
    """Rewrite a screenshot with a 64-colour palette: a quarter of the bytes, still legible."""
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=colors)
    small.save(path, optimize=True)


def _kernel_idle(lab: Lab, name: str) -> bool:
    sessions = [s for s in lab.api("sessions") if s.get("path", "").endswith(name)]
    return bool(sessions) and all(s["kernel"]["execution_state"] == "idle" for s in sessions)


def _wait(cond, timeout: float, step: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(step)
    return None


def run_notebook(driver, lab: Lab, name: str, *, timeout: float = 900, shot: Path | None = None,
                 solutions_of: Path | None = None, watch: Path = ROOT) -> Outcome:
    """Open ``<notebook dir>/<name>``, Run All Cells, wait for the kernel to go idle; then, with
    ``solutions_of`` (a notebook file), append its solutions as cells and run them; report the
    page and what was written under ``watch`` (outside reports/, data/) and under ``$HOME``."""
    from selenium.webdriver.common.by import By

    before, home_before = snapshot(watch, skip=ALLOWED), snapshot(lab.home)
    driver.get(lab.url(f"lab/tree/{name}") + "&reset")  # reset: no tabs restored from a workspace
    if not _wait(lambda: (_read(driver) or {}).get("prompts") and _kernel_idle(lab, name), 120):
        raise RuntimeError(f"{name}: the notebook or its kernel did not come up in JupyterLab within 120 s")
    t0 = time.monotonic()
    menu = next(e for e in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel") if e.text == "Run")
    menu.click()
    _wait(lambda: driver.find_elements(By.CSS_SELECTOR, 'li.lm-Menu-item[data-command="runmenu:run-all"]'), 10,
          0.2)[0].click()

    def finished():
        page = _read(driver)
        # the kernel goes idle between cells: done when idle and no cell is queued or running
        return page if page and not any("*" in p for p in page["prompts"]) and _kernel_idle(lab, name) else None

    def settled(limit: float):
        time.sleep(2)
        return _wait(lambda: _wait(finished, 1, 0.5) and _wait(finished, 3, 3), limit, 2)  # idle twice, 3 s apart

    settled(timeout)
    code = solutions(solutions_of) if solutions_of else []
    if code and time.monotonic() - t0 < timeout:
        start = driver.execute_script(_APPEND_AND_RUN, name, code)
        if start is None:
            raise RuntimeError(f"{name}: no open notebook panel to append the solutions to")
        # the first solution cell is queued ([*]) or done before 'finished' may count idle as done
        _wait(lambda: (p := (_read(driver) or {}).get("prompts", [])) and len(p) > start and p[start].strip("[]: "),
              60, 0.5)
        settled(timeout - (time.monotonic() - t0))
    seconds = time.monotonic() - t0
    _scroll_through(driver)
    page = _read(driver) or {"prompts": [], "errors": [], "stderr": [], "images": []}
    if shot:
        shot.parent.mkdir(parents=True, exist_ok=True)
        # the notebook panel alone (no file browser), at the end of the notebook
        driver.find_element(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden)").screenshot(str(shot))
        small_png(shot)
    hover = hover_timeline(driver)  # after the screenshot, which shows the notebook's end
    lab.shut_down(name)
    prompts = page["prompts"]
    return Outcome(notebook=name, seconds=round(seconds, 1), code_cells=len(prompts),
                   not_run=[i + 1 for i, p in enumerate(prompts) if not any(ch.isdigit() for ch in p)],
                   errors=page["errors"], stderr=page["stderr"],
                   broken_images=[src for ok, src in page["images"] if not ok],
                   written=changed(before, snapshot(watch, skip=ALLOWED)),
                   home_written=changed(home_before, snapshot(lab.home), allowed=tuple(HOME_CACHES)),
                   solution_cells=len(code), timed_out=seconds >= timeout, hover=hover)


def notebooks(which: list[str]) -> list[str]:
    """Notebook file names for prefixes like ``00`` (or ``all``), in lab order."""
    names = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not which or which == ["all"]:
        return names
    picked = [n for n in names if n[:2] in which]
    unknown = set(which) - {n[:2] for n in picked}
    if unknown:
        raise SystemExit(f"browser_lab: no notebook numbered {sorted(unknown)}; have {[n[:2] for n in names]}")
    return picked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("which", nargs="*", default=["all"], help="notebook numbers (00 01 ...) or all")
    p.add_argument("--mode", default="small", choices=jupyter_lab.MODES)
    p.add_argument("--shots", type=Path, default=ROOT / "reports" / "browser")
    p.add_argument("--reports", type=Path, default=None, help="LABKIT_REPORTS for the runs (default: a temp folder)")
    p.add_argument("--solutions", action="store_true",
                   help="after Run All, append each exercise solution as cells (never saved) and run them too")
    args = p.parse_args(argv)
    why = missing()
    if why:
        print(f"browser_lab: {why}", file=sys.stderr)
        return 2
    reports = args.reports or Path(tempfile.mkdtemp(prefix="labkit-browser-reports-"))
    bad: list[str] = []
    from labkit.record.proc import signals_as_interrupt

    # SIGTERM, SIGHUP as Ctrl-C: the server and the browser are stopped on the way out (the default
    # action ended Python at once and left both running), then one line
    try:
        with signals_as_interrupt(), serve(mode=args.mode, reports=reports) as lab, chromium() as driver:
            for name in notebooks(args.which):
                out = run_notebook(driver, lab, name, shot=args.shots / f"{name[:-6]}.png",
                                   solutions_of=ROOT / "notebooks" / name if args.solutions else None)
                bad += [] if out.clean else [name]
                print(json.dumps(out.__dict__), flush=True)
    except KeyboardInterrupt as exc:
        print(f"browser_lab: {exc.args[0] if exc.args else 'interrupted'}: JupyterLab and the browser stopped; "
              f"the notebooks before it are in the JSON lines above", file=sys.stderr)
        return 130
    if bad:  # the JSON lines above say what each showed
        print(f"browser_lab: not clean in the browser: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
