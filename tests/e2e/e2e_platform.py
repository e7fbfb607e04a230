"""Helpers of the end-to-end tests (a uniquely named module, importable from the tests):
the running platform's endpoints, the `gpuctl` CLI pointed at it, and `eventually`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
START_TIMEOUT = 300.0


@dataclass
class RunningPlatform:
    endpoints: dict[str, Any]
    output: list[str] = field(default_factory=list)

    def services(self, kind: str) -> list[dict[str, Any]]:
        return [s for s in self.endpoints["services"] if s["kind"] == kind]

    def url(self, name: str) -> str:
        return str(next(s["url"] for s in self.endpoints["services"] if s["name"] == name))

    @property
    def kubeconfig(self) -> Path:
        return Path(self.endpoints["kubeconfig"])

    def gpuctl(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """The `gpuctl` CLI as a user runs it, pointed at this platform's gpuctl server."""
        return self.gpuctl_stdin("", *args, timeout=timeout)

    def gpuctl_stdin(self, stdin: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "GPUCTL_SERVER": self.url("gpuctl")}
        return subprocess.run(
            [str(BIN / "gpuctl"), *args],
            env=env,
            cwd=ROOT,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def pump_lines(stream: Any, sink: list[str]) -> None:
    for line in stream:
        sink.append(line.rstrip("\n"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


T = TypeVar("T")


def eventually(check: Callable[[], T | None], timeout: float, what: str) -> T:
    """Retry `check` until it returns something truthy (the cluster settles asynchronously)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
