"""Settings shared by every gpuplane service, read from the environment.

The base class has no ``env_prefix``: each service subclasses it with its own
prefix so that two services in one pod (or one test process) never read each
other's variables, and adds its own fields::

    from pydantic_settings import SettingsConfigDict
    from gpuplane_core.settings import ServiceSettings

    class ControllerSettings(ServiceSettings):
        model_config = SettingsConfigDict(env_prefix="GPUPLANE_CONTROLLER_")

        http_port: int = 8080
        grpc_port: int = 9090
        resync_seconds: float = 30.0

    # GPUPLANE_CONTROLLER_HTTP_PORT=8081 GPUPLANE_CONTROLLER_LOG_JSON=false
    settings = ControllerSettings()

Subclass ``model_config`` is merged with this one, so ``extra="ignore"`` is kept, and
the port and log-level validators still apply to overridden fields.
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


class ServiceSettings(BaseSettings):
    """Process-level knobs common to all services (listen addresses, logging, kube access, limits)."""

    model_config = SettingsConfigDict(extra="ignore")

    http_host: str = "0.0.0.0"
    http_port: int
    grpc_port: int
    log_level: str = "INFO"
    log_json: bool = True
    kubeconfig: str | None = None
    """Path to a kubeconfig; ``None`` means in-cluster config, or ``$KUBECONFIG`` outside a cluster."""
    max_request_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    """Request bodies above this are answered with 413 before being read."""

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in _LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
        return level

    # A validator rather than Field(ge=, le=) so it still applies when a subclass overrides
    # the field with a plain ``http_port: int = 8080``.
    @field_validator("http_port", "grpc_port")
    @classmethod
    def _valid_port(cls, value: int) -> int:
        if not 1 <= value <= 65535:
            raise ValueError("must be between 1 and 65535")
        return value
