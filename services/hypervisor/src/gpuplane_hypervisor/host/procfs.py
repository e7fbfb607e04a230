"""Reading the host's /proc (the DaemonSet runs with hostPID) to map container PIDs to host PIDs."""

from __future__ import annotations

import os
from pathlib import Path

from gpuplane_hypervisor.domain.procfs import ProcCandidate, parse_nspid, parse_start_ticks


class ProcFs:
    def __init__(self, root: str = "/proc") -> None:
        self.root = Path(root)

    def _read(self, pid: int, name: str) -> str | None:
        try:
            return (self.root / str(pid) / name).read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
            return None  # the process exited meanwhile, or is not ours to read

    def candidates(self, container_pid: int) -> list[ProcCandidate]:
        """Processes whose innermost namespace PID is ``container_pid``."""
        out = []
        for entry in os.scandir(self.root):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            status = self._read(pid, "status")
            nspid = parse_nspid(status) if status else None
            if not nspid or nspid[-1] != container_pid:
                continue
            stat = self._read(pid, "stat")
            out.append(
                ProcCandidate(
                    host_pid=pid,
                    nspid=nspid,
                    cgroup_text=self._read(pid, "cgroup") or "",
                    start_ticks=parse_start_ticks(stat) if stat else 0,
                )
            )
        return out

    def start_ticks(self, pid: int) -> int | None:
        """The process start time, or None when no such process runs."""
        stat = self._read(pid, "stat")
        return parse_start_ticks(stat) if stat else None
