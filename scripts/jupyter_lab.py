"""Start JupyterLab on the lab's notebooks the way workshops need it (`make jupyter` runs this).

    python scripts/jupyter_lab.py [--port 8888] [--ip 127.0.0.1] [--mode small|full]

- runs as root (workshop containers and cloud VMs usually do) by adding ``--allow-root``;
- the notebooks read ``LABKIT_MODE``: ``--mode`` (or ``MODE=`` through make) sets it;
- the token is ``$JUPYTER_TOKEN`` (Jupyter's standard variable), else a fresh random one;
- prints the URL with its token on one line, the line to paste into a browser;
- no "get notified about Jupyter news?" pop-up on a fresh start: JupyterLab shows it while the
  ``fetchNews`` setting of ``@jupyterlab/apputils-extension:notification`` is "none" (Ask), so
  the server starts with an application settings folder (``<reports>/jupyterlab-settings``)
  whose ``overrides.json`` sets it to "false" (Never) and ``checkForUpdates`` to false (the
  environment's own overrides are kept; a user's own choice in Settings still wins), and it
  never asks PyPI for updates (``jupyterlab.NeverCheckForUpdate``);
- keeps JupyterLab's checkpoints in ``<reports>/checkpoints/`` (``$LABKIT_REPORTS``, else
  ``reports/``), not in ``notebooks/.ipynb_checkpoints/``: the lab writes only under ``reports/``
  and ``data/`` (what the browser test checks).

The browser test (tests/test_browser.py) starts JupyterLab through :func:`command` and
:func:`lab_env`, so what it tests is what `make jupyter` runs.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from labkit.errors import check_writable
from labkit.paths import atomic_write

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
MODES = ("small", "full")


def checkpoints_dir(env: dict | None = None) -> Path:
    """Where JupyterLab keeps its checkpoints: ``checkpoints/`` in the reports folder."""
    from labkit.env import reports_dir

    return (reports_dir(ROOT / "reports", env=env) / "checkpoints").resolve()  # one rule: labkit.env.reports_dir


NO_NEWS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}
"""Settings overrides that keep JupyterLab from asking about (and fetching) news and updates."""


def app_settings(folder: Path, default: Path | None = None) -> Path:
    """Write ``folder``: JupyterLab's application settings folder with :data:`NO_NEWS` merged
    into the environment's own ``overrides.json`` (``default``: the environment's settings
    folder, ``<app dir>/settings``), and its ``page_config.json`` copied when it has one."""
    if default is None:
        from jupyterlab.commands import get_app_dir

        default = Path(get_app_dir()) / "settings"
    check_writable(folder)  # a folder it creates is the lab's (make reset)
    theirs = {}
    if (default / "overrides.json").is_file():
        try:
            theirs = json.loads((default / "overrides.json").read_text())
        except (OSError, ValueError):
            theirs = {}
    merged = {**theirs, **{k: {**theirs.get(k, {}), **v} for k, v in NO_NEWS.items()}}
    atomic_write(folder / "overrides.json", json.dumps(merged, indent=1) + "\n", overwrite=True)
    if (default / "page_config.json").is_file():
        shutil.copyfile(default / "page_config.json", folder / "page_config.json")
    return folder


def command(*, port: int, ip: str = "127.0.0.1", notebook_dir: Path = NOTEBOOKS,
            checkpoints: Path | None = None, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The ``jupyter lab`` command line (JupyterLab of this interpreter's environment); writes
    its application settings folder (:func:`app_settings`) beside the checkpoints. The token is
    never on it (any local user reads a command line with ``ps``): the server reads it from
    ``$JUPYTER_TOKEN`` in its environment (``/proc/PID/environ``: readable by its user only)."""
    checkpoints = checkpoints or checkpoints_dir()
    settings = app_settings(checkpoints.parent / "jupyterlab-settings")
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ip={ip}", f"--port={port}",
            "--port-retries=0",  # a taken port is an error, not a silent move to another port
            f"--ServerApp.root_dir={notebook_dir}",
            f"--FileCheckpoints.checkpoint_dir={checkpoints}", f"--LabApp.app_settings_dir={settings}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")
    return argv + list(extra)


def lab_env(*, mode: str | None, base: dict | None = None) -> dict[str, str]:
    """Environment for the server and its kernels: ``LABKIT_MODE`` set when a mode is given."""
    env = dict(os.environ if base is None else base)
    if mode:
        if mode not in MODES:
            raise SystemExit(f"jupyter_lab: mode {mode!r} is not one of {MODES}: use MODE=small or MODE=full")
        env["LABKIT_MODE"] = mode
    return env


def url(*, port: int, ip: str, token: str, path: str = "lab") -> str:
    """The address to open; for a server on every interface, this machine's name."""
    host = socket.gethostname() if ip in ("0.0.0.0", "::", "") else ip
    return f"http://{host}:{port}/{path}?token={token}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8888))
    p.add_argument("--ip", default=os.environ.get("IP") or "127.0.0.1",
                   help="interface to listen on (0.0.0.0: every interface; keep the token secret)")
    p.add_argument("--mode", default=os.environ.get("LABKIT_MODE") or None, help="small or full (sets LABKIT_MODE)")
    args = p.parse_args(argv)
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        print("jupyter_lab: JupyterLab is not installed: pip install -e '.[jupyter]' (make jupyter does)",
              file=sys.stderr)
        return 2
    token = os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(24)
    env = lab_env(mode=args.mode)
    env["JUPYTER_TOKEN"] = token
    print(f"JupyterLab ({env.get('LABKIT_MODE', 'full')} mode) at: {url(port=args.port, ip=args.ip, token=token)}",
          flush=True)
    server = subprocess.Popen(command(port=args.port, ip=args.ip, checkpoints=checkpoints_dir(env)),
                              env=env, cwd=ROOT)
    # `kill` of this launcher (SIGTERM) stops the server too, instead of leaving it orphaned
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    while True:
        try:
            return server.wait()
        except KeyboardInterrupt:
            # Ctrl-C reached the server too (one process group): let it ask its question (a second
            # Ctrl-C skips it) and shut its kernels down itself, rather than killing it mid-way
            continue


if __name__ == "__main__":
    sys.exit(main())
