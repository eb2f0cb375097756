"""Issue 61 (round 4): what labkit passes on to make, a shell, Jupyter and nsys is data.

Real make invocations, a real JupyterLab launcher, real files; the nsys tests profile a real
program under the installed nsys."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def _make(*args, env=None, timeout=60, cwd=ROOT):
    return subprocess.run(["make", "-s", *args], cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


HOSTILE = ['$(shell touch {m}/shell)', '`touch {m}/backquote`', '$$(touch {m}/dollar)',
           "x'; touch {m}/quote; '", 'x"; touch {m}/dquote; "', 'a b; touch {m}/space']


@pytest.mark.parametrize("target,var", [("nsys-ui", "REPORT"), ("nsys-ui", "IP"), ("nsys-ui", "PORT"),
                                        ("jupyter", "MODE"), ("jupyter", "PORT"), ("jupyter", "IP"),
                                        ("lab", "MODE"), ("reset", "DRY_RUN"), ("test", "PYTEST_ARGS"),
                                        ("jupyter", "JUPYTER_TOKEN"), ("container-run", "REPORTS")])
def test_make_variables_are_data_never_code(tmp_path, target, var):
    """A make variable (a report file name, a port, a mode...) holding backquotes, $(shell ...), $(...),
    quotes or spaces runs no command: make never expands it and no recipe pastes it on a shell line.
    The recipe runs with the variable as given, so each target fails on its value instead; the
    marker files that expanding it would create never appear."""
    marks = tmp_path / "marks"
    marks.mkdir()
    stamp = tmp_path / "installed"  # a fresh install stamp and python that does nothing: no install runs
    stamp.touch()
    reports = tmp_path / "reports"
    reports.mkdir()
    for value in HOSTILE:
        out = _make(target, f"{var}={value.format(m=marks)}", f"STAMP={stamp}", "PY=/bin/true", "PYTHON=/bin/true",
                    "CONTAINER_ENGINE=/bin/true",
                    env={"LABKIT_REPORTS": str(reports)}, timeout=120)
        assert not list(marks.iterdir()), (value, out.stdout, out.stderr)


def test_make_variables_from_the_environment_are_data_too(tmp_path):
    """The same values in the environment (VENV=... make lab, REPORT=... make nsys-ui) run nothing either."""
    marks = tmp_path / "marks"
    marks.mkdir()
    stamp = tmp_path / "installed"
    stamp.touch()
    for var, target in (("VENV", "lab"), ("REPORT", "nsys-ui"), ("MODE", "jupyter"), ("PYTEST_ARGS", "test")):
        for value in HOSTILE:
            out = _make(target, f"STAMP={stamp}", "PY=/bin/true", "PYTHON=/bin/true",
                        env={var: value.format(m=marks)})
            assert not list(marks.iterdir()), (var, value, out.stderr)


def test_make_nsys_ui_hands_the_report_name_over_as_it_is(tmp_path):
    """`make nsys-ui REPORT=<a real file whose name holds $(...), backquotes, quotes, spaces and a
    leading dash>` gives scripts/nsys_ui.py exactly that name, after `--` (never read as an option)."""
    import json

    name = "-x `touch M` $(touch M) $$(id) 'q\" b.nsys-rep"
    rep = tmp_path / name
    rep.write_bytes(b"x")
    got = tmp_path / "argv.json"
    fake = tmp_path / "python"  # stands for the interpreter: records the argv make gave it
    fake.write_text(f"#!{PY}\nimport json, sys\nopen({str(got)!r}, 'w').write(json.dumps(sys.argv))\n")
    fake.chmod(0o755)
    out = _make("nsys-ui", f"REPORT={rep}", f"PYTHON={fake}", "PORT=6099")
    assert out.returncode == 0, out.stderr
    argv = json.loads(got.read_text())
    assert argv[1] == "scripts/nsys_ui.py" and argv[-2:] == ["--", str(rep)] and "6099" in argv
    assert not (ROOT / "M").exists() and not (tmp_path / "M").exists()


def _jupyter(*args, token):
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_TOKEN"}
    if token is not None:
        env["JUPYTER_TOKEN"] = token
    return subprocess.run([PY, str(ROOT / "scripts" / "jupyter_lab.py"), *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_jupyter_on_a_taken_port_fails_in_one_line_before_the_token_is_shown():
    """`make jupyter` on a port another program listens on: one line naming the port and PORT=,
    never the URL with its token (whoever holds the port would get it), no Jupyter log. A weak
    token is fine on the loopback: the port is what is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        for token in ("s3cret-token-of-the-workshop", "x"):
            out = _jupyter("--port", str(port), "--ip", "127.0.0.1", "--mode", "small", token=token)
            assert out.returncode != 0
            assert token not in out.stdout + out.stderr and "token=" not in out.stdout + out.stderr
            assert len(out.stderr.strip().splitlines()) == 1 and f"127.0.0.1:{port}" in out.stderr
            assert "PORT=" in out.stderr and "ServerApp" not in out.stderr


@pytest.mark.parametrize("ip", ["0.0.0.0", "my-host.example"])
def test_a_weak_token_beyond_the_loopback_is_refused_in_one_line(ip):
    """JUPYTER_TOKEN=x with IP=0.0.0.0 (every interface), or any address that is not the loopback:
    refused in one line saying the rule (16 characters, or unset for a generated one); nothing starts."""
    out = _jupyter("--port", "1", "--ip", ip, token="x")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "at least 16 characters" in out.stderr and "unset" in out.stderr and "token=" not in out.stdout


SECRETS = {"JUPYTER_TOKEN": "jt-0123456789abcdef", "JPY_API_TOKEN": "hub-tok", "MY_SERVICE_SECRET": "svc-secret-value",
           "DB_PASSWORD": "db-password-value", "AWS_SECRET_ACCESS_KEY": "aws-key", "hf_token": "lower-case-too"}


def test_a_profiled_program_never_sees_the_secrets_of_labkits_environment(tmp_path, monkeypatch):
    """nsys 2025.x writes the profiled process's environment into each report: a real program run
    under nsys by labkit.record prints its environment, and JUPYTER_TOKEN, JPY_API_TOKEN, *_SECRET,
    *_PASSWORD, AWS_SECRET_ACCESS_KEY (any case) are not in it; other variables and the ones the caller
    passes in env= on purpose are."""
    import json

    from labkit.record import nsys

    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("LABKIT_PLAIN_SETTING", "kept")
    prog = "import json, os; print('ENV=' + json.dumps(dict(os.environ)))"
    rec = nsys.record([PY, "-c", prog], name="env", outdir=tmp_path, trace=("nvtx",), progress=False,
                      env={"GIVEN_TOKEN": "asked-for"}, timeout_s=300)
    line = next(x for x in rec.log.read_text().splitlines() if x.startswith("ENV="))
    seen = json.loads(line[4:])
    assert not set(SECRETS) & set(seen), set(SECRETS) & set(seen)
    assert seen["LABKIT_PLAIN_SETTING"] == "kept" and seen["GIVEN_TOKEN"] == "asked-for"
    assert not any(v in rec.log.read_text() for v in SECRETS.values())  # nor in labkit's own log line


def test_the_doctor_says_nsys_records_the_environment_and_what_labkit_removes(monkeypatch):
    from labkit import doctor

    monkeypatch.setenv("JUPYTER_TOKEN", "abc")
    check = next(c for c in doctor.run_checks() if c.name == "environment")
    assert "records the profiled program's environment" in check.detail
    assert "*_TOKEN" in check.detail and "AWS_SECRET_ACCESS_KEY" in check.detail and "JUPYTER_TOKEN" in check.detail
