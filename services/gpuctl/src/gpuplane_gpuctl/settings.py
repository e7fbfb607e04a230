"""Settings of the gpuctl service (environment prefix GPUPLANE_GPUCTL_)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from gpuplane_core.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLANE_GPUCTL_")

    http_port: int = 8000
    grpc_port: int = 9092
