"""Settings of the lens service (environment prefix GPUPLANE_LENS_)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from gpuplane_core.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLANE_LENS_")

    http_port: int = 8090
    grpc_port: int = 9093
