"""Settings of the gpuctl service (environment prefix GPUPLANE_GPUCTL_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from gpuplane_core.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLANE_GPUCTL_")

    http_port: int = 8000
    grpc_port: int = 9092
    controller_address: str | None = None
    """host:port of the controller's gRPC CapacityService; without it fractional jobs are refused (503)."""
    max_yaml_bytes: int = Field(default=256 * 1024, ge=1024)
    max_batch_items: int = Field(default=100, ge=1)
