"""A real process in a new PID namespace, placed in a cgroup named like a kubelet pod cgroup.

The hypervisor's registration check looks for ``pod<uid>`` in /proc/<pid>/cgroup,
which is what kubelet's cgroupfs driver produces. This machine has no kubelet,
so the test builds that cgroup path itself (as root) and starts the "container"
in it; every child inherits it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

_HIERARCHIES = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup")


@dataclass
class Container:
    outer_pid: int
    worker_host_pid: int  # the `sleep`, PID 2 inside the namespace
    worker_container_pid: int
    cgroup: Path


def _members(cgroup: Path) -> list[int]:
    """PIDs in the cgroup (the test's own, uniquely named hierarchy)."""
    try:
        return [int(x) for x in (cgroup / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _nspid(pid: int) -> list[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return [int(x) for x in line.split()[1:]]
    return []


def _unavailable(reason: str) -> NoReturn:
    """Skip on a developer machine without the privileges; CI runs as root, where it must run."""
    if os.environ.get("CI"):
        pytest.fail(f"process-registration test cannot run in CI: {reason}")
    pytest.skip(reason)


def _make_cgroup(pod_uid: str) -> Path:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        _unavailable("needs root and unshare(1) for PID namespaces and cgroups")
    tag = secrets.token_hex(3)
    for root in _HIERARCHIES:
        base = Path(root)
        if not (base / "cgroup.procs").exists():
            continue
        path = base / f"gpuplane-test-{tag}" / "kubepods" / f"pod{pod_uid}" / "ctr"
        try:
            path.mkdir(parents=True)
            return path
        except OSError:
            continue
    _unavailable("no writable cgroup hierarchy on this machine")


def _remove_cgroup(path: Path) -> None:
    top = next(p for p in path.parents if p.name.startswith("gpuplane-test-"))
    for p in [path, *path.parents]:
        for _ in range(50):
            try:
                p.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)  # processes still leaving
        if p == top:
            break


@contextmanager
def pod_container(pod_uid: str) -> Iterator[Container]:
    cgroup = _make_cgroup(pod_uid)
    script = (
        f'echo $$ > "{cgroup}/cgroup.procs" && '
        "exec unshare --pid --fork --mount-proc sh -c 'sleep 300 & wait'"
    )
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        worker = None
        while worker is None and time.monotonic() < deadline:
            for pid in _members(cgroup):
                try:
                    ns = _nspid(pid)
                except OSError:
                    continue
                if len(ns) >= 2 and ns[-1] == 2:
                    worker = pid
            time.sleep(0.02)
        assert worker is not None, "the namespaced child did not start"
        yield Container(proc.pid, worker, 2, cgroup)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _remove_cgroup(cgroup)
