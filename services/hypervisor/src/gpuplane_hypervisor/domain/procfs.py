"""Parsing of /proc text (no I/O here): NSpid, start time, cgroup membership of a pod."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplane_core.errors import Conflict, NotFound


def parse_nspid(status_text: str) -> tuple[int, ...] | None:
    """The PIDs of a process from the host namespace inward (``NSpid:`` of /proc/<pid>/status)."""
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            try:
                return tuple(int(x) for x in line.split()[1:])
            except ValueError:
                return None
    return None


def parse_start_ticks(stat_text: str) -> int:
    """Field 22 (starttime) of /proc/<pid>/stat; the comm field may contain spaces and parens."""
    rest = stat_text[stat_text.rfind(")") + 2 :].split()
    # rest[0] is field 3 (state), so starttime (field 22) is rest[19].
    return int(rest[19]) if len(rest) > 19 else 0


def pod_cgroup_markers(pod_uid: str) -> tuple[str, ...]:
    """How kubelet names a pod's cgroup: cgroupfs ``pod<uid>``, systemd ``pod<uid_with_underscores>``."""
    uid = pod_uid.lower()
    return (f"pod{uid}", f"pod{uid.replace('-', '_')}")


def in_pod_cgroup(cgroup_text: str, pod_uid: str) -> bool:
    markers = pod_cgroup_markers(pod_uid)
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1].lower()
        if any(m in path for m in markers):
            return True
    return False


@dataclass(frozen=True)
class ProcCandidate:
    host_pid: int
    nspid: tuple[int, ...]
    cgroup_text: str
    start_ticks: int


def choose_host_pid(
    candidates: list[ProcCandidate], container_pid: int, pod_uid: str, check_cgroup: bool
) -> ProcCandidate:
    """The one process whose innermost PID is ``container_pid`` and that belongs to the pod.

    With ``check_cgroup`` the process must sit in the pod's cgroup; without it
    (no kubelet cgroups on the machine) the match must at least be unambiguous.
    """
    matching = [c for c in candidates if c.nspid and c.nspid[-1] == container_pid]
    if check_cgroup:
        matching = [c for c in matching if in_pod_cgroup(c.cgroup_text, pod_uid)]
    if not matching:
        where = "in this pod's cgroup" if check_cgroup else "on this node"
        raise NotFound(
            f"no process with container PID {container_pid} {where}",
            code="process_not_found",
            field="container_pid",
        )
    if len(matching) > 1:
        raise Conflict(
            f"container PID {container_pid} matches {len(matching)} host processes; "
            "enable the pod cgroup check to tell them apart",
            code="ambiguous_pid",
            field="container_pid",
        )
    return matching[0]
