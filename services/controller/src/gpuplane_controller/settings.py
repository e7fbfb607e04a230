"""Settings of the controller service (environment prefix GPUPLANE_CONTROLLER_)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from gpuplane_core.settings import ServiceSettings


class Settings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLANE_CONTROLLER_")

    http_port: int = 8080
    grpc_port: int = 9090
    grpc_host: str = "0.0.0.0"
