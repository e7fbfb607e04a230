"""Settings of the hypervisor service (environment prefix GPUPLANE_HYPERVISOR_; flags override them)."""

from __future__ import annotations

import socket
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from gpuplane_core.settings import ServiceSettings
from gpuplane_hypervisor.domain.simulated_spec import parse_simulated_devices


class QosPricing(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tflops_per_hour: float = Field(ge=0)
    vram_gib_per_hour: float = Field(ge=0)
    limits_over_requests: float = Field(default=0.0, ge=0)


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLANE_HYPERVISOR_")

    http_port: int = 8001
    grpc_port: int = 9091  # unused: the hypervisor is a gRPC client only
    node_name: str = Field(
        default_factory=socket.gethostname,
        validation_alias=AliasChoices("node_name", "GPUPLANE_HYPERVISOR_NODE_NAME", "NODE_NAME"),
    )
    backend: Literal["nvml", "simulated", "null"] = "nvml"
    simulated_devices: str = ""
    """``4xH100-80GB`` style inventory for the simulated backend."""
    simulated_usage_file: str | None = None
    """JSON file another process writes to set simulated per-process usage (see gpu/simulated.py)."""
    fail_on_init_error: bool = True
    """NVML init failure: True keeps /readyz at 503 with the reason; False serves no devices."""
    discovery_interval: float = Field(default=60.0, gt=0)
    sample_interval: float = Field(default=1.0, gt=0)
    controller: str | None = None
    """Controller gRPC address (host:port); None runs stand-alone with no allocations."""
    heartbeat_interval: float = Field(default=10.0, gt=0)
    """Used until the controller's RegisterNode answer says otherwise."""
    state_file: str = "/var/lib/gpuplane/hypervisor/state.json"
    proc_root: str = "/proc"
    pod_cgroup_check: bool = True
    """Require a registered process to sit in its pod's cgroup (kubelet ``pod<uid>``). Turn off only
    where pods have no kubelet cgroups; then a container PID must match exactly one host process."""
    token_audiences: list[str] | None = None
    review_cache_seconds: float = Field(default=60.0, ge=0)
    shm_host_root: str = "/run/tensor-fusion/shm"
    pool: str = ""
    metrics_interval: float = Field(default=10.0, gt=0)
    metrics_file: str | None = None
    """Append tf_worker_resources / tf_node_metrics rows (line protocol) to this file."""
    metrics_write_url: str | None = None
    """Optionally POST the same rows to an InfluxDB/GreptimeDB write endpoint."""
    pricing: dict[Literal["low", "medium", "high", "critical"], QosPricing] = Field(default_factory=dict)
    """The pool's ``qosConfig.pricing`` per QoS level (JSON in the env); unset levels use the defaults."""
    node_cost_per_hour: float | None = Field(default=None, ge=0)
    """GPUNode spec.costPerHour; None prices the node from the model table."""

    @field_validator("node_name")
    @classmethod
    def _node_name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    @model_validator(mode="after")
    def _simulated_needs_devices(self) -> Settings:
        if self.backend == "simulated":
            if not self.simulated_devices.strip():
                raise ValueError("backend 'simulated' needs simulated_devices, e.g. 4xH100-80GB")
            parse_simulated_devices(self.simulated_devices)
        return self
