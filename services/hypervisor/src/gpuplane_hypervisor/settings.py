"""Settings of the hypervisor service (environment prefix GPUPLANE_HYPERVISOR_)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from gpuplane_core.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLANE_HYPERVISOR_")

    http_port: int = 8001
    grpc_port: int = 9091
