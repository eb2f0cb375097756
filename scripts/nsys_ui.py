"""The real Nsight Systems GUI (``nsys-ui``) of a report, in the browser (`make nsys-ui` runs this).

    python scripts/nsys_ui.py REPORT.nsys-rep [--port 6080] [--ip 127.0.0.1] [--geometry 1600x900]

Four processes, each started in its own process group and waited for until it is ready:

1. ``Xvfb``: a virtual display; it picks a free display number itself (``-displayfd``) and
   admits only clients holding a fresh cookie (``-auth``, written with ``xauth``);
2. ``nsys-ui REPORT``, Debian's ``nsight-systems`` GUI, on that display: ready when its main window
   is up and its splash screen gone (``xdotool``), then sized to the display. Its settings for the
   session start from yours (``~/.config/NVIDIA Corporation/``) with the first-run questions
   answered (usage data: no; preset: CPU rows on top), in the session's folder: yours are not changed;
3. ``x11vnc``: a VNC server of the display on the loopback only (``-localhost``), with a generated
   password (read from a file it removes, never on the command line);
4. ``websockify``: serves noVNC (Debian's ``/usr/share/novnc``) on ``--ip:--port`` and relays its
   WebSocket to the VNC server: ready when ``vnc.html`` answers.

Then it prints the URL to open (the password rides in it, as a Jupyter token does) and waits.
Ctrl-C or ``kill`` (SIGTERM) stops every process group, reaps them all (this script is their
subreaper) and removes the session's folder and the GUI's shared-memory files; closing the GUI
ends the session too, and the children get SIGTERM if this script is killed outright. Works as root.
A report that does not exist, a busy port, a missing package or a GUI already running for this
user (nsys-ui keeps one instance per user: a second hands its report to the first and exits) end
in one line naming the fix.
"""
from __future__ import annotations

import argparse
import configparser
import contextlib
import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

NOVNC = Path("/usr/share/novnc")
SHM = Path("/dev/shm")
APT = "apt-get install xvfb xauth xdotool x11vnc novnc websockify"
TITLE = "NVIDIA Nsight Systems"  # how the main window's name starts (nsys-ui 2022.4: "... 2022.4.2")
TOOLS = ("Xvfb", "xauth", "xdotool", "x11vnc", "websockify")
INI = Path("NVIDIA Corporation") / "NVIDIA Nsight Systems.ini"  # nsys-ui's settings (Qt), below the config folder
# nsys-ui asks these at its first start, in modal dialogs; {v} is its version ("2022.4.2")
FIRST_RUN = {
    "CorePlugin.Privacy": {"AskedFor_NVIDIA%20Nsight%20Systems_{v}": "HasAsked", "CorePlugin.AllowAnalytics": "false"},
    "QuadDPlugin.OptionsPreset": {"QuadDPlugin.AskedFor_NVIDIA%20Nsight%20Systems_{v}": "HasAsked",
                                  "QuadDPlugin.OptionsPreset": "standardPreset"},  # "CPU rows on top"
    "QuadDPlugin.ReportBehavior": {"QuadDPlugin.TimelineMode": "defaultMode"},
    "CorePlugin.Environment": {"CorePlugin.ShowVersionUpdateNotifications": "false"},  # no network needed
}


class UiError(Exception):
    """A problem the user fixes: its message is the one line printed."""


def find_nsys_ui() -> str | None:
    """The ``nsys-ui`` launcher: on PATH, beside ``$LABKIT_NSYS`` or the ``nsys`` on PATH (its
    ``host-linux-x64`` folder), or where Debian's package puts it."""
    if shutil.which("nsys-ui"):
        return shutil.which("nsys-ui")
    candidates = []
    for nsys in (os.environ.get("LABKIT_NSYS"), shutil.which("nsys")):
        if nsys and Path(nsys).exists():
            here = Path(nsys).resolve().parent
            candidates += [here / "nsys-ui", here.parent / "host-linux-x64" / "nsys-ui"]
    candidates.append(Path("/usr/lib/nsight-systems/host-linux-x64/nsys-ui"))
    return next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def missing() -> str | None:
    """Why the GUI cannot be served here (None when it can): the first missing piece and its fix."""
    for tool in TOOLS:
        if not shutil.which(tool):
            return f"{tool} not found: {APT}"
    if not (NOVNC / "vnc.html").is_file():
        return f"noVNC not found in {NOVNC}: {APT}"
    if not find_nsys_ui():
        return "nsys-ui not found: run scripts/install-nsys (Debian's nsight-systems package ships it)"
    return None


def check_port(ip: str, port: int) -> None:
    """Raise UiError when ``ip:port`` cannot be listened on (busy, or not an address here)."""
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as s:
        try:
            s.bind((ip, port))
        except OSError as exc:
            what = "is busy" if exc.errno == 98 else f"cannot be used ({exc.strerror})"
            raise UiError(f"port {port} on {ip or '0.0.0.0'} {what}: pass another, e.g. PORT={port + 1}") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def url(*, port: int, ip: str, password: str) -> str:
    """The noVNC page that connects at once and scales the display to the browser window."""
    host = socket.gethostname() if ip in ("0.0.0.0", "::", "") else ip
    return f"http://{host}:{port}/vnc.html?autoconnect=1&resize=scale&password={password}"


def _wait(ready, timeout: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None):
    """Poll ``ready()`` until it returns something truthy; UiError naming ``what`` on timeout or
    when ``proc`` exits first (with the last line of its ``log``)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = ready()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise UiError(f"{what} exited with code {proc.returncode}{_last_line(log)}")
        time.sleep(0.25)
    raise UiError(f"{what} was not ready within {timeout:.0f} s{_last_line(log)}")


def _last_line(log: Path | None) -> str:
    lines = [l.strip() for l in log.read_text(errors="replace").splitlines() if l.strip()] if log and log.exists() else []
    return f" ({lines[-1]}; log: {log})" if lines else ""


def nsys_ui_version(launcher: str | None = None) -> str:
    """The GUI's version ("2022.4.2") as its launcher script names it, or "" when it does not."""
    try:
        text = Path(launcher or find_nsys_ui() or "").read_text(errors="replace")
    except OSError:
        return ""
    found = re.search(r'"(\d{4}\.\d+(?:\.\d+)?) \(Build', text)
    return found.group(1) if found else ""


def seed_settings(config: Path, *, version: str | None = None, home_config: Path | None = None) -> Path:
    """Write nsys-ui's settings below ``config``: the user's own (``$XDG_CONFIG_HOME`` or
    ``~/.config``) when they exist, plus the answers to its first-run questions that they lack
    (:data:`FIRST_RUN`), so no modal dialog stands before the report. Returns the file."""
    version = nsys_ui_version() if version is None else version
    home_config = home_config or Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    ini = configparser.ConfigParser(interpolation=None, strict=False, delimiters=("=",))
    ini.optionxform = str  # Qt's keys are case-sensitive
    with contextlib.suppress(OSError, configparser.Error):
        ini.read(home_config / INI)
    for section, values in FIRST_RUN.items():
        if not ini.has_section(section):
            ini.add_section(section)
        for key, value in values.items():
            if "{v}" in key and not version:
                continue
            key = key.format(v=version)
            if not ini.has_option(section, key):
                ini.set(section, key, value)
    path = config / INI
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        ini.write(f, space_around_delimiters=False)
    return path


class Session:
    """A running GUI: its display, ports, URL and processes. ``with Session(...) as s:`` stops
    everything on the way out, whatever happened."""

    def __init__(self, report: str | os.PathLike, *, port: int = 6080, ip: str = "127.0.0.1",
                 geometry: str = "1600x900", timeout: float = 120.0):
        self.report = Path(report).expanduser().resolve()
        self.port, self.ip, self.geometry, self.timeout = port, ip, geometry, timeout
        self.procs: list[subprocess.Popen] = []
        self.folder: Path | None = None
        self.display = ""
        self.vnc_port = 0
        self.password = secrets.token_hex(4)  # VNC passwords are 8 characters at most
        self.env: dict[str, str] = {}
        self.gui_window = 0  # the main window's X id
        self.shm_before: set[str] | None = None  # /dev/shm's names before the GUI started

    def __enter__(self) -> Session:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return url(port=self.port, ip=self.ip, password=self.password)

    def _spawn(self, argv: list[str], name: str, **kw) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 (the child holds it)
        with log:
            proc = subprocess.Popen(argv, stdout=kw.pop("stdout", log), stderr=log, stdin=subprocess.DEVNULL,
                                    env=kw.pop("env", self.env), start_new_session=True, **kw,
                                    preexec_fn=_die_with_parent)  # noqa: PLW1509 (started before any thread)
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        if not self.report.is_file():
            raise UiError(f"no report at {self.report}: pass REPORT=path/to/x.nsys-rep (an existing file)")
        check_port(self.ip, self.port)
        why = missing()
        if why:
            raise UiError(why)
        other = running_gui()
        if other:
            raise UiError(f"nsys-ui already runs for this user (pid {other}), and it keeps one instance per user "
                          "(a second hands its report to the first and exits): stop that one first (Ctrl-C where "
                          f"make nsys-ui runs, or kill {other}), or run this one as another user")
        become_subreaper()
        self.folder = Path(tempfile.mkdtemp(prefix="labkit-nsys-ui-"))  # mode 0700
        self.env = {**os.environ, "XAUTHORITY": str(self.folder / "Xauthority"),
                    "XDG_RUNTIME_DIR": str(self.folder)}
        self._start_xvfb()
        self._start_gui()
        self._start_vnc()
        self._start_web()

    def _start_xvfb(self) -> None:
        cookie = secrets.token_hex(16)
        auth = self.env["XAUTHORITY"]
        # the server loads every cookie in its -auth file; clients look theirs up by display name,
        # added once Xvfb has said which display it took
        Path(auth).touch(mode=0o600)
        subprocess.run(["xauth", "-q", "-f", auth, "add", ":0", ".", cookie], check=True, env=self.env)
        rd, wr = os.pipe()
        try:
            proc = self._spawn(["Xvfb", "-displayfd", str(wr), "-auth", auth, "-screen", "0", f"{self.geometry}x24",
                                "-nolisten", "tcp", "-noreset"], "xvfb", pass_fds=(wr,))
            os.close(wr)
            wr = -1
            number = b""
            end = time.monotonic() + 20
            while not number.endswith(b"\n"):
                if not select.select([rd], [], [], max(0.0, end - time.monotonic()))[0]:
                    raise UiError(f"Xvfb gave no display number within 20 s{_last_line(self.folder / 'xvfb.log')}")
                chunk = os.read(rd, 16)
                if not chunk:
                    raise UiError(f"Xvfb exited with code {proc.wait()}{_last_line(self.folder / 'xvfb.log')}")
                number += chunk
        finally:
            os.close(rd)
            if wr >= 0:
                os.close(wr)
        self.display = f":{int(number)}"
        self.env["DISPLAY"] = self.display
        subprocess.run(["xauth", "-q", "-f", auth, "add", self.display, ".", cookie], check=True, env=self.env)

    def xdotool(self, *args: str) -> str:
        """xdotool on the session's display; its output ('' when it failed)."""
        return subprocess.run(["xdotool", *args], env=self.env, capture_output=True, text=True, timeout=30,
                              check=False).stdout

    def windows(self) -> list[tuple[int, str, int, int]]:
        """(id, name, width, height) of the visible top-level windows with a name on the display:
        the GUI's (the display is the session's own)."""
        found = []
        for wid in self.xdotool("search", "--onlyvisible", "--maxdepth", "1", "--name", ".").split():
            geometry = self.xdotool("getwindowgeometry", wid)
            size = next((l.split()[-1] for l in geometry.splitlines() if "Geometry:" in l), "0x0")
            w, h = (int(v) for v in size.split("x"))
            found.append((int(wid), self.xdotool("getwindowname", wid).strip(), w, h))
        return found

    def main_window(self) -> int:
        """The id of the GUI's main window once it is up alone (the splash screen and the loading
        dialogs gone), else 0."""
        wins = self.windows()
        main = [w for w in wins if w[2] >= 640 and w[1].startswith(TITLE)]
        return main[0][0] if len(main) == 1 and len(wins) == 1 else 0

    def _start_gui(self) -> None:
        self.shm_before = set(os.listdir(SHM)) if SHM.is_dir() else set()
        seed_settings(self.folder / "config")
        self.env["XDG_CONFIG_HOME"] = str(self.folder / "config")
        # TMPDIR: nsys-ui keeps one instance per user through a socket in the temporary folder (a
        # second one hands its report to the first and exits); the session's own folder keeps it apart
        proc = self._spawn([find_nsys_ui(), str(self.report)], "nsys-ui", cwd=self.folder,
                           env={**self.env, "TMPDIR": str(self.folder)})
        wid = _wait(self.main_window, self.timeout, "nsys-ui", proc, self.folder / "nsys-ui.log")
        w, h = self.geometry.split("x")
        self.xdotool("windowmove", "--sync", str(wid), "0", "0")
        self.xdotool("windowsize", "--sync", str(wid), w, h)
        self.gui_window = wid

    def _start_vnc(self) -> None:
        pw = self.folder / "vncpass"
        pw.write_text(self.password + "\n")
        # x11vnc takes the first free port from 5900 on the loopback and says "PORT=n" once it listens
        proc = self._spawn(["x11vnc", "-display", self.display, "-localhost", "-forever", "-shared",
                            "-passwdfile", f"rm:{pw}", "-noxdamage", "-nowf", "-quiet"], "x11vnc",
                           stdout=subprocess.PIPE)

        def port() -> int:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line = proc.stdout.readline().decode(errors="replace")
                if line.startswith("PORT="):
                    return int(line.split("=")[1])
            return 0

        self.vnc_port = _wait(port, 30, "x11vnc", proc, self.folder / "x11vnc.log")

    def _start_web(self) -> None:
        proc = self._spawn(["websockify", "--web", str(NOVNC), f"{self.ip}:{self.port}",
                            f"127.0.0.1:{self.vnc_port}"], "websockify")
        local = "127.0.0.1" if self.ip in ("0.0.0.0", "") else ("::1" if self.ip == "::" else self.ip)
        page = f"http://{local if ':' not in local else f'[{local}]'}:{self.port}/vnc.html"

        def answers() -> bool:
            try:
                with urllib.request.urlopen(page, timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        _wait(answers, 30, "websockify", proc, self.folder / "websockify.log")

    def gui_alive(self) -> bool:
        return len(self.procs) > 1 and self.procs[1].poll() is None

    def stop(self) -> None:
        """Stop every process group (the web server first, the display last), reap all their
        members (this process is their subreaper), then remove the session's folder."""
        groups = {proc.pid for proc in self.procs}
        members = [pid for pid, pgid in _processes() if pgid in groups]
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            with contextlib.suppress(ProcessLookupError):  # what is left of the group
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if proc.stdout:
                proc.stdout.close()
        _reap(members)
        if self.shm_before is not None:
            _remove_gui_memory(members, self.shm_before)
            self.shm_before = None
        self.procs.clear()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def running_gui() -> int | None:
    """The pid of an nsys-ui of this user that is running (not a zombie), if any."""
    for pid, _ in _processes():
        try:
            entry = Path(f"/proc/{pid}")
            stat = (entry / "stat").read_text()
            if (entry / "comm").read_text().strip() == "nsys-ui.bin" and entry.stat().st_uid == os.getuid() \
                    and stat[stat.rindex(")") + 2] != "Z":
                return pid
        except (OSError, ValueError):
            continue
    return None


def _remove_gui_memory(members: list[int], before: set[str]) -> None:
    """Remove the shared-memory files that the stopped GUI leaves in /dev/shm: its own
    (``AgoraIPCMemory-<pid>``) and, when no other nsys-ui of this user runs, the one-instance
    guard it created (Qt's, a 40-hex-digit name)."""
    if not SHM.is_dir():
        return
    alone = running_gui() is None
    for name in set(os.listdir(SHM)) - before:
        ours = name.startswith("AgoraIPCMemory-") and name.split("-")[-1].isdigit() and int(name.split("-")[-1]) in members
        guard = alone and re.fullmatch(r"[0-9a-f]{40}", name) is not None
        if ours or guard:
            with contextlib.suppress(OSError):
                (SHM / name).unlink()


def _die_with_parent() -> None:
    """In a child before it runs: SIGTERM when this script dies, even by SIGKILL (Linux), so that
    no display or server outlives it; the GUI, an X client, ends with its display."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def become_subreaper() -> None:
    """Make this process the subreaper of its descendants (Linux): nsys-ui's launcher starts the
    crash reporter, which starts the GUI; when the launcher dies first they are re-parented here,
    not to PID 1 (which, in some containers, never reaps them), so :meth:`Session.stop` reaps them."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _processes() -> list[tuple[int, int]]:
    """(pid, process group) of every process (``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                found.append((int(entry.name), int(stat[stat.rindex(")") + 2:].split()[2])))
    return found


def _reap(pids: list[int], timeout: float = 10.0) -> None:
    """Wait until none of ``pids`` exists, reaping those that are (now) this process's children."""
    end = time.monotonic() + timeout
    left = set(pids)
    while left and time.monotonic() < end:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    left.discard(pid)
            except ChildProcessError:  # not ours: gone, or someone else's to reap
                if not Path(f"/proc/{pid}").exists():
                    left.discard(pid)
        if left:
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("report", help="the .nsys-rep to open")
    p.add_argument("--port", type=int, default=6080, help="the web page's port (default 6080)")
    p.add_argument("--ip", default="127.0.0.1", help="interface to listen on (0.0.0.0: every interface)")
    p.add_argument("--geometry", default="1600x900", help="the virtual display's size")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the GUI's window")
    args = p.parse_args(argv)

    def on_signal(*_):  # Ctrl-C or kill: once; a second signal must not cut the stopping short
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        with Session(args.report, port=args.port, ip=args.ip, geometry=args.geometry, timeout=args.timeout) as s:
            print(f"Nsight Systems GUI of {s.report.name} at: {s.url}", flush=True)
            print(f"(display {s.display}, XAUTHORITY={s.env['XAUTHORITY']}; Ctrl-C stops it)", flush=True)
            while s.gui_alive():
                time.sleep(0.5)
            print("nsys_ui: the GUI was closed; stopping", file=sys.stderr)
    except UiError as exc:
        print(f"nsys_ui: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("nsys_ui: stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
