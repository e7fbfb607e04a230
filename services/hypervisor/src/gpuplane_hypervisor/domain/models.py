"""The hypervisor's domain values: devices, usage samples, allocations and registrations."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

QOS_LEVELS = ("low", "medium", "high", "critical")
ISOLATION_MODES = ("shared", "soft", "hard", "partitioned")
DEFAULT_QOS = "medium"
DEFAULT_ISOLATION = "soft"


@dataclass(frozen=True)
class DeviceInfo:
    """One accelerator as discovery found it. ``uuid`` is lower-cased by the backend."""

    uuid: str
    vendor: str
    model: str
    index: int
    numa_node: int
    total_memory_bytes: int
    max_tflops: float
    healthy: bool
    unhealthy_reason: str = ""
    isolation_mode: str = DEFAULT_ISOLATION
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessSample:
    """Usage of one host process on one device."""

    pid: int
    memory_bytes: int
    compute_percent: float


@dataclass(frozen=True)
class DeviceSample:
    """Device-level usage and its per-process accounting at one instant."""

    uuid: str
    memory_used_bytes: int
    utilization_percent: float
    processes: tuple[ProcessSample, ...] = ()


@dataclass(frozen=True)
class Resources:
    """Per-GPU amounts, parsed from quantities at the gRPC boundary (None = unset)."""

    tflops: float | None = None
    vram: int | None = None
    compute_percent: float | None = None


@dataclass(frozen=True)
class Allocation:
    """Which pod got which GPUs on this node, and on what terms (from the controller)."""

    pod_uid: str
    namespace: str
    pod_name: str
    gpu_names: tuple[str, ...]
    gpu_uuids: tuple[str, ...]
    request: Resources
    limit: Resources
    qos: str = DEFAULT_QOS
    isolation: str = DEFAULT_ISOLATION
    gpu_count: int = 0
    workload: str = ""
    pool: str = ""


class EventType(Enum):
    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"
    SYNCED = "synced"
    RESET = "reset"


@dataclass(frozen=True)
class AllocationEvent:
    type: EventType
    revision: int
    allocation: Allocation | None = None


@dataclass(frozen=True)
class Registration:
    """A GPU process a pod's limiter registered: container PID mapped to host PID.

    ``start_ticks`` is the process start time from ``/proc/<pid>/stat`` so a
    reused PID is never mistaken for the registered process after a restart.
    """

    host_pid: int
    container_pid: int
    container_name: str
    pod_uid: str
    pod_name: str
    namespace: str
    start_ticks: int
