"""The CPUs a recorded program could use: its affinity and its container's CPU quota, read when labkit
starts the recording (labkit.env.usable_cpus), kept in the recording's log and counted by the judgement
in place of the machine's cores (nsys's CpuCores), where they are fewer."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import labkit
from labkit.env import usable_cpus

ROOT = Path(__file__).resolve().parents[1]


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_affinity_limits_the_cpus():
    """A process pinned to one CPU (taskset, docker --cpuset-cpus) can use one, whatever the machine has."""
    code = ("import os; from labkit.env import usable_cpus; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "print(usable_cpus())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    assert out.strip() == "1"
    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize("files, quota", [
    # cgroup v2: a pod's 1.5 CPUs under a parent without a limit: the next whole CPU
    ({"proc/self/cgroup": "0::/kubepods/pod1\n", "sys/fs/cgroup/kubepods/pod1/cpu.max": "150000 100000\n",
      "sys/fs/cgroup/kubepods/cpu.max": "max 100000\n"}, 2),
    # v2 inside a container (its cgroup reads "/"): the root's file is the container's
    ({"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cpu.max": "100000 100000\n"}, 1),
    # v2: the limit set on a cgroup above the process's
    ({"proc/self/cgroup": "0::/a/b\n", "sys/fs/cgroup/a/cpu.max": "50000 100000\n",
      "sys/fs/cgroup/a/b/cpu.max": "max 100000\n"}, 1),
    # cgroup v1 (docker --cpus=0.5 on this VM's kind of host): cpu.cfs_quota_us over cpu.cfs_period_us
    ({"proc/self/cgroup": "4:cpu,cpuacct:/docker/abc\n2:memory:/docker/abc\n",
      "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000\n",
      "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"}, 1),
    # no limit (v1's -1, v2's max) and unreadable text: the affinity alone
    ({"proc/self/cgroup": "1:cpu:/\n", "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
      "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cpu.max": "lots\n"}, None),
])
def test_a_containers_cpu_quota_limits_the_cpus(tmp_path, files, quota):
    mine = len(os.sched_getaffinity(0))
    assert usable_cpus(_tree(tmp_path, files)) == (mine if quota is None else min(mine, quota))


@pytest.mark.nsys
def test_the_judgement_counts_the_cpus_the_recorded_program_could_use(tmp_path):
    """threads_over_cores (four threads a batch on this VM's two cores) recorded by labkit: its log
    says how many CPUs the program could use, and the report counts them. Where the log says one (as a
    container limited to one CPU records), the judgement counts one core, the machine's two stay in the
    metadata, the report says so, and no less of the window has more threads ready than cores."""
    from known_answers import profile

    from labkit.judge.accounting import account

    rep = profile("threads_over_cores", tmp_path)
    log = rep.path.with_suffix(".log")
    note = log.read_text().splitlines()[-1]
    assert note.endswith(f" cpus={usable_cpus()}"), note
    machine = rep.meta.get("machine_cpu_cores", rep.meta["cpu_cores"])
    assert rep.meta["cpu_cores"] == min(machine, usable_cpus())
    window = labkit.advise(rep).attrs["window"]
    before = account(rep, window=window)

    log.write_text(log.read_text().replace(note, note.rsplit(" cpus=", 1)[0] + " cpus=1"))
    one = labkit.load_report(rep.path)
    assert one.meta["cpu_cores"] == 1 and one.meta["machine_cpu_cores"] == machine
    assert any(f"could use 1 of the machine's {machine} CPUs" in n for n in one.notes), one.notes
    after = account(one, window=window)
    # four workers compute at once in half of every batch: with one core counted, about half the window
    # has more threads ready than cores (a CI run: 285 of 607 ms, against 253 with two); never less than
    # with two, as the same threads are ready
    assert after.cores == 1 and after.oversubscribed_ms >= before.oversubscribed_ms
    assert after.oversubscribed_ms > 0.3 * after.window_ms, (after.oversubscribed_ms, after.window_ms)
    fix = labkit.advise(one)
    fix = fix[fix["lever"] == "cheaper_stage"].iloc[0]
    assert fix["basis"] == "estimate" and "1 core the profiled run had" in fix["assumptions"], fix["assumptions"]

    # a log that is not labkit's (a colleague's, edited) counts for nothing and breaks nothing
    log.write_text(log.read_text().replace(" cpus=1", " cpus=0x10").replace("interrupted=0", "interrupted=no"))
    other = labkit.load_report(rep.path)
    assert other.meta["cpu_cores"] == machine and "machine_cpu_cores" not in other.meta
