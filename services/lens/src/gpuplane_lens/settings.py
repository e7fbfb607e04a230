"""Settings of the lens service (environment prefix GPUPLANE_LENS_)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from gpuplane_core.settings import ServiceSettings

_PACKAGE_DIR = Path(__file__).parent


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLANE_LENS_")

    http_port: int = 8090
    grpc_port: int = 9093

    data_dir: Path = Path("/var/lib/lens")
    """SQLite database, software cache and the kubeconfig temp files live here."""
    database_url: str | None = None
    """SQLAlchemy URL (e.g. ``postgresql+psycopg://user:pw@host/db``); SQLite under data_dir when unset."""
    encryption_keys: list[str] = Field(default_factory=list)
    """Fernet keys, newest first; rows are re-encrypted to the first at start. Unset: ``key_file``."""
    key_file: Path | None = None
    """0600 file with one Fernet key per line (newest first), created when missing.
    Defaults to ``<data_dir>/lens.key``: outside the database file, so a leaked DB alone is useless."""

    versions_file: Path = _PACKAGE_DIR / "versions.yaml"
    llm_d_repo_url: str = "https://github.com/llm-d/llm-d.git"
    llm_d_benchmark_repo_url: str = "https://github.com/llm-d/llm-d-benchmark.git"
    download_timeout_s: float = 600.0

    gateway_api_crds_url: str = (
        "https://github.com/kubernetes-sigs/gateway-api/releases/download/{version}/standard-install.yaml"
    )
    gateway_api_inference_extension_crds_url: str = (
        "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/"
        "{version}/v1-manifests.yaml"
    )

    probe_timeout_s: float = 5.0
    """How long `ready` waits for a cluster's /readyz (all clusters are probed concurrently)."""
    request_timeout_s: float = 15.0
    """Per-call deadline for reads against a managed cluster."""
    disk_cache_s: float = 30.0
    """How long the kubelet Summary disk figures of a cluster are reused by the overview."""
    node_cache_idle_s: float = 300.0
    """A cluster's node watch (behind the overview) stops after this long without an overview."""
    prometheus_service: str | None = None
    """The managed clusters' Prometheus as ``namespace/service:port``, queried through the API
    server's service proxy for node memory usage; unset means memory usage is null (unknown)."""
    lens_hosts: list[str] = Field(default_factory=list)
    """Override the addresses offered by GET /api/cluster/lens-hosts."""
    prepull_namespace: str = "llm-d-lens-system"
    prepull_helper_image: str = "docker.io/library/busybox:1.36"

    kubespray_dir: Path | None = None
    """The pinned Kubespray checkout (v2.31.0) holding cluster.yml; bootstrap jobs run from it."""
    ansible_playbook: str | None = None
    """ansible-playbook binary; unset: the one installed beside Lens, else from PATH."""
    bootstrap_check_timeout_s: float = 15.0
    """Deadline of each SSH host-key read and each preflight check (all run concurrently)."""
    bootstrap_preflight_valid_s: float = 3600.0
    """How long a passing preflight allows a bootstrap of the same nodes and pins."""
    bootstrap_cancel_grace_s: float = 5.0
    """After SIGTERM to a job's process group, SIGKILL follows this much later."""

    @property
    def resolved_key_file(self) -> Path:
        return self.key_file or self.data_dir / "lens.key"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'lens.db'}"
