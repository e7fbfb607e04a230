"""The allocator's value types. Amounts are exact integers: TFLOPs in milli-TFLOPs,
VRAM in bytes, so comparisons never suffer from rounding."""

from __future__ import annotations

from dataclasses import dataclass, field

QOS_LEVELS = ("low", "medium", "high", "critical")
ISOLATION_MODES = ("shared", "soft", "hard", "partitioned")
STRATEGIES = ("CompactFirst", "LowLoadFirst", "NodeCompactGPULowLoad")
DEFAULT_STRATEGY = "NodeCompactGPULowLoad"
DEFAULT_MAX_WORKERS_PER_NODE = 256


@dataclass(frozen=True)
class Amount:
    """TFLOPs (milli), VRAM (bytes) and compute percent (milli-percent); zero means unset."""

    tflops_m: int = 0
    vram: int = 0
    percent_m: int = 0


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str


@dataclass
class AllocRequest:
    """What one pod asks for, per GPU, parsed from its tensor-fusion.ai/* annotations."""

    pod: PodRef
    pool: str
    request: Amount
    limit: Amount
    gpu_count: int = 1
    qos: str = "medium"
    isolation: str = "soft"
    gpu_model: str = ""
    vendor: str = ""
    gpu_indices: tuple[int, ...] = ()
    dedicated_gpu: bool = False
    workload: str = ""
    is_local_gpu: bool = False


@dataclass(slots=True)  # slots: the filters read these fields for every GPU of a pool
class Gpu:
    """One GPU as reported by its node's hypervisor (the GPU object's status)."""

    name: str
    node: str
    pool: str = ""
    phase: str = "Running"
    vendor: str = ""
    model: str = ""
    uuid: str = ""
    index: int = 0
    numa_node: int = -1
    isolation_mode: str = ""
    capacity_tflops_m: int = 0
    capacity_vram: int = 0
    # Oversold capacity: capacity * tflopsOversellRatio / 100 (the pool's setting).
    virtual_tflops_m: int = 0
    # Kept up to date by the allocator from the allocations on this GPU.
    used_tflops_m: int = 0
    used_vram: int = 0
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def available_tflops_m(self) -> int:
        return self.virtual_tflops_m - self.used_tflops_m

    @property
    def available_vram(self) -> int:
        return self.capacity_vram - self.used_vram


@dataclass
class Allocation:
    """A reservation: the request plus the GPUs chosen for it."""

    req: AllocRequest
    node: str
    gpus: tuple[str, ...]
    # Per-GPU reserved TFLOPs (compute-percent requests resolve per GPU capacity).
    tflops_m: tuple[int, ...] = ()


@dataclass
class Quota:
    """A namespace's GPUResourceQuota; None fields mean no limit."""

    namespace: str
    total_tflops_m: int | None = None
    total_vram: int | None = None
    total_limit_tflops_m: int | None = None
    total_limit_vram: int | None = None
    max_workers: int | None = None
    single_max_tflops_m: int | None = None
    single_max_vram: int | None = None
    single_max_limit_tflops_m: int | None = None
    single_max_limit_vram: int | None = None
    single_max_gpu_count: int | None = None


@dataclass(frozen=True)
class PoolConfig:
    name: str
    oversell_percent: int = 100
    strategy: str = DEFAULT_STRATEGY
    vram_weight: float = 0.7
    tflops_weight: float = 0.3
    max_workers_per_node: int = DEFAULT_MAX_WORKERS_PER_NODE
