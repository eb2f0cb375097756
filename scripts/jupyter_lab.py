"""Start JupyterLab on the lab's notebooks the way workshops need it (`make jupyter` runs this).

    python scripts/jupyter_lab.py [--port 8888] [--ip 127.0.0.1] [--mode small|full] [--url-host HOST] [--executed]

- runs as root (workshop containers and cloud VMs usually do) by adding ``--allow-root``;
- the notebooks read ``LABKIT_MODE``: ``--mode`` (or ``MODE=`` through make) sets it;
- the token is ``$JUPYTER_TOKEN`` (Jupyter's standard variable), else a fresh random one; the
  server reads it from its environment, never from its command line (which ``ps`` shows to
  every user of the machine, containers' processes included);
- refuses in one line, before anything is printed or started, a port that is taken (whoever holds
  it would receive the token) and a ``JUPYTER_TOKEN`` under 16 characters on an interface beyond the
  loopback (``--ip 0.0.0.0``); on the loopback any token is taken;
- prints the URL with its token on one line, the line to paste into a browser (``--url-host``,
  or ``$URL_HOST``, names the host in it: a container's published address);
- no "get notified about Jupyter news?" pop-up on a fresh start: JupyterLab shows it while the
  ``fetchNews`` setting of ``@jupyterlab/apputils-extension:notification`` is "none" (Ask), so
  the server starts with an application settings folder (``<reports>/jupyterlab-settings``)
  whose ``overrides.json`` sets it to "false" (Never) and ``checkForUpdates`` to false (the
  environment's own overrides are kept; a user's own choice in Settings still wins), and it
  never asks PyPI for updates (``jupyterlab.NeverCheckForUpdate``);
- ``--executed`` (``make jupyter EXECUTED=1``) opens the notebooks ``make lab`` executed, with their
  outputs (``<reports>/notebooks/``), instead of the lab's clean ones; one line, before anything
  starts, when the lab has not run yet;
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

from labkit.env import reports_dir

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
MODES = ("small", "full")


def checkpoints_dir(env: dict | None = None) -> Path:
    """Where JupyterLab keeps its checkpoints: ``checkpoints/`` in the reports folder."""
    return (reports_dir(ROOT / "reports", env=env) / "checkpoints").resolve()


def executed_dir(env: dict | None = None) -> Path:
    """Where ``make lab`` (scripts/run_lab.py) leaves the executed notebooks: ``notebooks/`` in the reports folder."""
    return (reports_dir(ROOT / "reports", env=env) / "notebooks").resolve()


def executed_refusal(folder: Path) -> str | None:
    """Why the executed notebooks cannot be opened (one line, with its fix), or None."""
    if not folder.is_dir() or not any(folder.glob("*.ipynb")):
        return (f"no executed notebooks in {folder}: run the lab first (make lab, or make lab MODE=small), "
                "or leave out EXECUTED=1 to open the lab's own notebooks")
    return None


NO_NEWS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}
"""Settings overrides that keep JupyterLab from asking about (and fetching) news and updates."""


def app_settings(folder: Path, default: Path | None = None) -> Path:
    """Write ``folder``: JupyterLab's application settings folder with :data:`NO_NEWS` merged
    into the environment's own ``overrides.json`` (``default``: the environment's settings
    folder, ``<app dir>/settings``), and its ``page_config.json`` copied when it has one."""
    if default is None:
        from jupyterlab.commands import get_app_dir

        default = Path(get_app_dir()) / "settings"
    folder.mkdir(parents=True, exist_ok=True)
    theirs = {}
    if (default / "overrides.json").is_file():
        try:
            theirs = json.loads((default / "overrides.json").read_text())
        except (OSError, ValueError):
            theirs = {}
    merged = {**theirs, **{k: {**theirs.get(k, {}), **v} for k, v in NO_NEWS.items()}}
    (folder / "overrides.json").write_text(json.dumps(merged, indent=1) + "\n")
    if (default / "page_config.json").is_file():
        shutil.copyfile(default / "page_config.json", folder / "page_config.json")
    return folder


def command(*, port: int, ip: str = "127.0.0.1", notebook_dir: Path = NOTEBOOKS,
            checkpoints: Path | None = None, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The ``jupyter lab`` command line (JupyterLab of this interpreter's environment); writes
    its application settings folder (:func:`app_settings`) beside the checkpoints. It holds no
    token: the server reads ``JUPYTER_TOKEN`` from the environment it is started with
    (:func:`lab_env`)."""
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


def lab_env(*, mode: str | None, base: dict | None = None, token: str | None = None) -> dict[str, str]:
    """Environment for the server and its kernels: ``LABKIT_MODE`` set when a mode is given,
    ``JUPYTER_TOKEN`` when a token is (the server's only source of its token)."""
    env = dict(os.environ if base is None else base)
    if token:
        env["JUPYTER_TOKEN"] = token
    if mode:
        if mode not in MODES:
            raise SystemExit(f"jupyter_lab: mode {mode!r} is not one of {MODES}: use MODE=small or MODE=full")
        env["LABKIT_MODE"] = mode
    return env


def url(*, port: int, ip: str, token: str, path: str = "lab", host: str | None = None) -> str:
    """The address to open: ``host`` when given (a container's published address), else for a
    server on every interface this machine's name, else ``ip``."""
    host = host or (socket.gethostname() if ip in ("0.0.0.0", "::", "") else ip)
    return f"http://{host}:{port}/{path}?token={token}"


MIN_TOKEN = 16
"""Characters a token needs when the server listens beyond the loopback (anyone who can reach the port can try it)."""


def loopback(ip: str) -> bool:
    """Whether ``ip`` (an address or ``localhost``) is this machine's loopback only."""
    import ipaddress

    if ip == "localhost":
        return True
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:  # a host name: it may name any interface
        return False


def refusal(*, ip: str, port: int, token: str | None) -> str | None:
    """Why the server must not start (one line, with its fix), checked before its URL and token are
    printed: a weak ``JUPYTER_TOKEN`` on an interface beyond the loopback, a port out of range or
    taken (whoever holds it would get the token the URL carries). None when it may start."""
    if token is not None and len(token) < MIN_TOKEN and not loopback(ip):
        return (f"JUPYTER_TOKEN has {len(token)} characters, and the server would listen on {ip}, beyond this "
                f"machine: use a token of at least {MIN_TOKEN} characters, or leave JUPYTER_TOKEN unset to have "
                f"one generated (any token is taken on the loopback, IP=127.0.0.1)")
    if not 0 < port < 65536:
        return f"port {port} is not a TCP port: pass PORT= between 1 and 65535"
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no hold
            s.bind((ip, port))
    except OSError as exc:
        return (f"cannot listen on {ip}:{port} ({exc.strerror or exc}): another program holds that port or the "
                f"address is not this machine's: pass PORT= with a free port (or IP= with an address of this machine)")
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8888))
    p.add_argument("--ip", default=os.environ.get("IP") or "127.0.0.1",
                   help="interface to listen on (0.0.0.0: every interface; keep the token secret)")
    p.add_argument("--mode", default=os.environ.get("LABKIT_MODE") or None, help="small or full (sets LABKIT_MODE)")
    p.add_argument("--url-host", default=os.environ.get("URL_HOST") or None,
                   help="host name in the printed URL (default: the --ip, or this machine's name for 0.0.0.0); "
                        "a container gets its published address this way (make container-run)")
    p.add_argument("--executed", action="store_true",
                   help="open the notebooks make lab executed (<reports>/notebooks/, with their outputs)")
    args = p.parse_args(argv)
    given = os.environ.get("JUPYTER_TOKEN") or None
    notebooks = executed_dir() if args.executed else NOTEBOOKS
    why = refusal(ip=args.ip, port=args.port, token=given) or (executed_refusal(notebooks) if args.executed else None)
    if why:
        print(f"jupyter_lab: {why}", file=sys.stderr)
        return 2
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        print("jupyter_lab: JupyterLab is not installed: pip install -e '.[jupyter]' (make jupyter does)",
              file=sys.stderr)
        return 2
    token = given or secrets.token_hex(24)
    env = lab_env(mode=args.mode, token=token)
    where = url(port=args.port, ip=args.ip, token=token, host=args.url_host)
    which = f", the executed notebooks in {notebooks}" if args.executed else ""
    print(f"JupyterLab ({env.get('LABKIT_MODE', 'full')} mode{which}) at: {where}", flush=True)
    server = subprocess.Popen(command(port=args.port, ip=args.ip, notebook_dir=notebooks, checkpoints=checkpoints_dir(env)),
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
