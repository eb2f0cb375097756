"""Screenshots of the Nsight Systems GUI in the browser for notebook 01's GUI segment.

    python scripts/nsys_ui_screens.py [--report reports/reference/gui/baseline.nsys-rep] [--out images]

Starts the GUI as `make nsys-ui` does (scripts/nsys_ui.py), opens its noVNC page in Debian's
headless chromium with a 1600x900 viewport (the virtual display's size, so the canvas is 1:1), and
saves what the browser shows:

- ``nsys_ui_timeline.png``: the report as it opens: the whole run's timeline;
- ``nsys_ui_zoom.png``: zoomed twice with the GUI's own "Zoom into Selection" (drag on the timeline,
  Shift+Z; xdotool on the virtual display) onto one batch in steady state, the pointer over its
  ``infer`` range so that the GUI's tooltip gives its duration.

The drag positions are pixels of this report at 1600x900 in nsys-ui 2022.4 (about 13.28-13.43 s of
the run); for another report, look at the result and adjust ``ZOOMS``. Needs what `make nsys-ui`
needs, plus chromium, chromium-driver and selenium.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import browser_lab  # scripts/ is on sys.path when run as a script
import nsys_ui

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "reference" / "gui" / "baseline.nsys-rep"
GEOMETRY = (1600, 900)
ZOOMS = ((700, 720), (899, 958))  # x from-to on the display, each followed by Shift+Z
ROW_Y = 443  # the stretch of the timeline below the last row: a drag there selects a time range
HOVER = (1209, 209)  # the zoomed batch's second infer range, on the main thread's NVTX row


def _viewport(driver, width: int, height: int) -> None:
    """Size the window so that the page itself is ``width`` x ``height``."""
    driver.set_window_size(width, height)
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight];")
    driver.set_window_size(2 * width - inner[0], 2 * height - inner[1])


def _connected(driver, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        status = driver.execute_script("const s = document.getElementById('noVNC_status');"
                                       "return s ? s.textContent : '';")
        if "Connected" in status:
            return
        time.sleep(0.5)
    raise SystemExit(f"nsys_ui_screens: noVNC did not connect within {timeout:.0f} s")


def _shot(driver, path: Path) -> None:
    # noVNC opens its control bar on connecting; fold it away (as a click outside it would)
    driver.execute_script("const b = document.getElementById('noVNC_control_bar');"
                          "if (b) { b.classList.remove('noVNC_open'); }")
    time.sleep(2.0)  # a frame or two of VNC updates after the last input, the bar's animation
    driver.save_screenshot(str(path))
    browser_lab.small_png(path, colors=128)
    print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} ({path.stat().st_size // 1024} KB)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--report", default=str(REPORT))
    p.add_argument("--out", default=str(ROOT / "images"))
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with nsys_ui.Session(args.report, port=browser_lab.free_port(),
                             geometry=f"{GEOMETRY[0]}x{GEOMETRY[1]}") as s, browser_lab.chromium() as driver:
            _viewport(driver, *GEOMETRY)
            driver.get(s.url)
            _connected(driver)
            _shot(driver, out / "nsys_ui_timeline.png")
            for x0, x1 in ZOOMS:
                s.xdotool("mousemove", str(x0), str(ROW_Y), "mousedown", "1", "mousemove", str((x0 + x1) // 2),
                          str(ROW_Y), "mousemove", str(x1), str(ROW_Y), "mouseup", "1")
                time.sleep(1.0)
                s.xdotool("key", "shift+z")
                time.sleep(2.0)
            s.xdotool("mousemove", *map(str, HOVER))
            time.sleep(2.0)  # the tooltip waits for the pointer to rest
            _shot(driver, out / "nsys_ui_zoom.png")
    except nsys_ui.UiError as exc:
        print(f"nsys_ui_screens: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
