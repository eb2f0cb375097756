"""`make nsys-ui`: the real Nsight Systems GUI of a report, in headless Chromium through noVNC.

test_the_gui_in_the_browser starts scripts/nsys_ui.py as `make nsys-ui` does, on the committed
baseline report (reports/reference/gui/), opens the URL it prints in Debian's headless chromium,
and checks what the page shows: noVNC connected, and the canvas holding the GUI with the report's
timeline drawn (its NVTX ranges' red and blue among hundreds of colours), while the virtual display
holds nsys-ui's main window and nsys-ui's settings list the report as opened. Then SIGTERM: every
process the script started is gone, and its folder, display and port with them. Skipped with the
reason where a piece is missing (nsys-ui, Xvfb, x11vnc, noVNC, websockify, xauth, xdotool, chromium,
chromium-driver, selenium); CI sets LABKIT_REQUIRE_BROWSER=1 so that absence fails instead. It took
14-21 s on the loaded 2-core VM (2026-11-25, five runs), nsys-ui's window up within 7-8 s of it.
"""
from __future__ import annotations

import io
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the launchers are scripts, not a package
import browser_lab  # noqa: E402
import nsys_ui  # noqa: E402

REPORT = ROOT / "reports" / "reference" / "gui" / "baseline.nsys-rep"
SCRIPT = [sys.executable, str(ROOT / "scripts" / "nsys_ui.py")]


def _why_not() -> str | None:
    why = nsys_ui.missing()
    for names, package in ((browser_lab.CHROMIUM, "chromium"), (browser_lab.CHROMEDRIVER, "chromium-driver")):
        if not why and not any(shutil.which(n) for n in names):
            why = f"{names[0]} not found: apt-get install {package}"
    if not why:
        try:
            import selenium  # noqa: F401
        except ImportError:
            why = "selenium not installed: pip install -e '.[test]'"
    if why and os.environ.get("LABKIT_REQUIRE_BROWSER"):  # set by .ci/run: CI must run this test
        pytest.fail(f"LABKIT_REQUIRE_BROWSER is set but {why}", pytrace=False)
    return why


def _reader(proc: subprocess.Popen) -> queue.Queue:
    """The script's output lines, as they come (a thread reads them: no buffering surprises)."""
    lines: queue.Queue = queue.Queue()

    def read():
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
    threading.Thread(target=read, daemon=True).start()
    return lines


def _line(lines: queue.Queue, proc: subprocess.Popen, timeout: float) -> str:
    """The next line of the script's output, or fail (the script is then stopped by SIGTERM, never
    killed: it must stop what it started)."""
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        why = "" if proc.poll() is None else f" (it exited: {proc.stderr.read().strip()})"
        pytest.fail(f"no line from nsys_ui.py within {timeout:.0f} s{why}")


def _descendants(root: int) -> set[int]:
    parent = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parent[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _canvas_facts(png: bytes) -> dict:
    """Distinct colours, the commonest colour's share, and the NVTX ranges' red and blue pixels."""
    import numpy as np
    from PIL import Image

    px = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3).astype(int)
    _, counts = np.unique(px, axis=0, return_counts=True)
    r, g, b = px[:, 0], px[:, 1], px[:, 2]
    return {"colours": len(counts), "top_share": counts.max() / len(px),
            "red": int(((r > 180) & (g < 90) & (b < 90)).sum()), "blue": int(((b > 180) & (r < 90) & (g < 90)).sum())}


def _rendered(facts: dict) -> bool:
    return facts["colours"] >= 100 and facts["top_share"] < 0.9 and facts["red"] >= 1000 and facts["blue"] >= 1000


def test_a_missing_report_is_one_line_naming_the_fix(tmp_path):
    r = subprocess.run([*SCRIPT, str(tmp_path / "nope.nsys-rep")], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == f"nsys_ui: no report at {tmp_path / 'nope.nsys-rep'}: pass REPORT=path/to/x.nsys-rep " \
                       "(an existing file)\n"


def test_a_busy_port_is_one_line_naming_the_fix():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([*SCRIPT, str(REPORT), "--port", str(port)], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == f"nsys_ui: port {port} on 127.0.0.1 is busy: pass another, e.g. PORT={port + 1}\n"


def test_first_run_answers_join_the_users_own_settings(tmp_path):
    """The session's settings start from the user's: their values stay, the missing answers join."""
    home = tmp_path / "home-config"
    (home / nsys_ui.INI).parent.mkdir(parents=True)
    (home / nsys_ui.INI).write_text("[CorePlugin.Privacy]\nCorePlugin.AllowAnalytics=true\n\n"
                                    "[CorePlugin.Environment]\nCorePlugin.ColorTheme=Dark\n")
    path = nsys_ui.seed_settings(tmp_path / "session", version="2022.4.2", home_config=home)
    text = path.read_text()
    assert path == tmp_path / "session" / "NVIDIA Corporation" / "NVIDIA Nsight Systems.ini"
    assert "CorePlugin.AllowAnalytics=true\n" in text and "CorePlugin.ColorTheme=Dark\n" in text  # theirs
    assert "AskedFor_NVIDIA%20Nsight%20Systems_2022.4.2=HasAsked\n" in text  # no usage-data question
    assert "QuadDPlugin.OptionsPreset=standardPreset\n" in text  # no preset question
    assert (home / nsys_ui.INI).read_text().count("\n") == 5  # the user's file is not touched
    assert nsys_ui.seed_settings(tmp_path / "s2", version="", home_config=tmp_path / "none").read_text() \
        .count("AskedFor") == 0  # a version it cannot read: no key for another version's question


@pytest.mark.browser
def test_the_gui_in_the_browser_then_nothing_left():
    why = _why_not()
    if why:
        pytest.skip(why)
    from selenium.webdriver.common.by import By

    port = browser_lab.free_port()
    proc = subprocess.Popen([*SCRIPT, str(REPORT), "--port", str(port)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = _reader(proc)
    try:
        first = _line(lines, proc, 180)
        head = f"Nsight Systems GUI of baseline.nsys-rep at: http://127.0.0.1:{port}/vnc.html?autoconnect=1&resize=scale&password="
        assert first.startswith(head) and len(first) == len(head) + 8, first
        url = first.split(" at: ")[1]
        second = _line(lines, proc, 30)  # "(display :N, XAUTHORITY=/tmp/.../Xauthority; Ctrl-C stops it)"
        display = second.split("display ")[1].split(",")[0]
        xauthority = Path(second.split("XAUTHORITY=")[1].split(";")[0])
        folder = xauthority.parent
        env = {**os.environ, "DISPLAY": display, "XAUTHORITY": str(xauthority)}
        started = _descendants(proc.pid)
        assert len(started) >= 5, started  # Xvfb, nsys-ui (launcher, crash reporter, GUI), x11vnc, websockify

        def xdotool(*args):
            return subprocess.run(["xdotool", *args], env=env, capture_output=True, text=True, timeout=30, check=False).stdout

        names = [xdotool("getwindowname", w).strip()
                 for w in xdotool("search", "--onlyvisible", "--maxdepth", "1", "--name", ".").split()]
        assert [n for n in names if n.startswith("NVIDIA Nsight Systems")], names
        ini = folder / "config" / nsys_ui.INI
        for _ in range(120):  # nsys-ui writes the reports it opened into its settings
            if f"filename={REPORT}" in ini.read_text(errors="replace"):
                break
            time.sleep(0.25)
        else:
            pytest.fail(f"nsys-ui's settings never listed {REPORT} as opened:\n{ini.read_text()}")

        with browser_lab.chromium() as driver:
            driver.set_window_size(1600, 1000)
            driver.get(url)
            status = facts = ""
            for _ in range(120):
                status = driver.execute_script("const s = document.getElementById('noVNC_status');"
                                               "return s ? s.textContent : '';")
                canvases = driver.find_elements(By.CSS_SELECTOR, "#noVNC_container canvas")
                if "Connected" in status and canvases and canvases[0].size["width"] > 0:
                    facts = _canvas_facts(canvases[0].screenshot_as_png)
                    if _rendered(facts):
                        break
                time.sleep(0.5)
            assert "Connected" in status, f"noVNC did not connect: {status!r}"
            assert _rendered(facts), f"the canvas does not show the report's timeline: {facts}"
            size = driver.execute_script("const c = document.querySelector('#noVNC_container canvas');"
                                         "return [c.width, c.height];")
            assert size == [1600, 900]  # the whole virtual display
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
    assert rc == 0 and proc.stderr.read() == "nsys_ui: stopped\n"
    left = [pid for pid in started if _alive(pid)]
    assert left == [], f"processes left after SIGTERM: {left}"
    assert not folder.exists()  # its settings, cookie and logs
    assert [p.name for p in Path("/dev/shm").glob("AgoraIPCMemory-*") if int(p.name.split("-")[1]) in started] == []
    assert not Path(f"/tmp/.X11-unix/X{display[1:]}").exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
