"""Settings of the controller service (environment prefix GPUPLANE_CONTROLLER_)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from gpuplane_controller.domain.hostports import parse_port_range
from gpuplane_core.errors import GpuplaneError
from gpuplane_core.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLANE_CONTROLLER_")

    http_port: int = 8080
    grpc_port: int = 9090
    grpc_host: str = "0.0.0.0"

    # -- node scaler (auto expander), dynamic config, hypervisor heartbeats (README "Operations") --
    enable_auto_expander: bool = False
    expander_interval_seconds: float = Field(default=5.0, gt=0)
    """How often the leader looks at unschedulable pods and in-flight GPUNodeClaims."""
    expander_claim_timeout_seconds: float = Field(default=600.0, gt=0)
    """An in-flight claim whose node is not Ready after this long stops holding back new claims."""
    expander_max_inflight_claims: int = Field(default=10, ge=1)
    """Per pool: no new claims while this many are in flight."""
    dynamic_config_path: str | None = None
    """YAML file with the dynamic config (polled for changes); wins over the ConfigMap settings."""
    dynamic_config_configmap: str | None = None
    dynamic_config_namespace: str = "tensor-fusion-sys"
    dynamic_config_poll_seconds: float = Field(default=2.0, gt=0)
    heartbeat_interval_seconds: int = Field(default=10, ge=1)
    """Told to hypervisors at registration."""
    heartbeat_timeout_seconds: float = Field(default=30.0, gt=0)
    """No heartbeat for this long (any replica): the GPUNode's hypervisor and its GPUs become Unknown."""
    heartbeat_lease_namespace: str = "kube-node-lease"
    """Where the per-node hypervisor Leases (`tf-hypervisor-<node>`) live."""
    allocation_history: int = Field(default=10000, ge=0)
    """Allocation changes kept so a reconnecting hypervisor can resume with deltas only."""

    # -- leader election, component endpoints (connections, host ports, indices) --
    leader_elect: bool = True
    """Off: this replica always leads (single replica only)."""
    lease_name: str = "gpuplane-controller-leader"
    lease_namespace: str = ""
    """Empty: $POD_NAMESPACE, else `default`. The assignment ledger ConfigMap lives here too."""
    lease_duration_seconds: float = Field(default=15.0, gt=0)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    """A leader that could not renew for this long steps down (must be < lease duration)."""
    retry_period_seconds: float = Field(default=2.0, gt=0)
    leader_identity: str = ""
    """Empty: $POD_NAME, else `<hostname>_<random uuid>`."""
    connection_wait_timeout_s: float = Field(default=300.0, gt=0)
    """`GET /api/connection` waits this long for the worker before answering 504."""
    token_review_ttl_seconds: float = Field(default=60.0, ge=0)
    """Successful TokenReviews are reused this long. Short (the reference caches ~30 min) so a
    token of a deleted pod stops working within a minute; ~1 review per pod per minute."""
    cluster_host_port_range: str = "42000-62000"
    """`-cluster-host-port-range`: ports handed out by `POST /api/assign-host-port`."""
    component_service_account: str = "system:serviceaccount:tensor-fusion-sys:tensor-fusion-controller"
    """TokenReview username allowed to call the assign endpoints (the controller's own SA)."""
    assignment_ledger: str = "gpuplane-controller-assignments"
    """ConfigMap (in the lease namespace) recording host port and index assignments."""
    assignment_grace_seconds: float = Field(default=600.0, gt=0)
    """An assignment whose pod never appears is released after this long."""

    @field_validator("cluster_host_port_range")
    @classmethod
    def _host_port_range(cls, value: str) -> str:
        try:
            parse_port_range(value)
        except GpuplaneError as e:
            raise ValueError(e.message) from None
        return value.strip()

    @model_validator(mode="after")
    def _lease_timing(self) -> Settings:
        if not self.retry_period_seconds < self.renew_deadline_seconds < self.lease_duration_seconds:
            raise ValueError(
                "leader election needs retry_period_seconds < renew_deadline_seconds < lease_duration_seconds"
            )
        return self
