"""Start, track and stop the control-plane processes of one devcluster.

Each process runs in its own session (so it outlives `devcluster up` and a
Ctrl-C in the terminal does not reach it), logs to `<state>/logs/<name>.log`
and records its PID in `<state>/pids/<name>.pid`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


class ProcessTable:
    def __init__(self, state: Path) -> None:
        self.logs = state / "logs"
        self.pids = state / "pids"

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pids.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        (self.pids / f"{name}.pid").write_text(str(proc.pid))
        return proc.pid

    def pid(self, name: str) -> int | None:
        try:
            return int((self.pids / f"{name}.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def alive(self, name: str) -> bool:
        pid = self.pid(name)
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # A zombie left by a parent that never reaped it is not alive.
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
        except (FileNotFoundError, IndexError):
            return False

    def stop(self, name: str, timeout: float = 10.0) -> None:
        pid = self.pid(name)
        if pid is not None and self.alive(name):
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout
            while self.alive(name) and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.alive(name):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        (self.pids / f"{name}.pid").unlink(missing_ok=True)

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            return "\n".join((self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"
