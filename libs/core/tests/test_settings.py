"""ServiceSettings: per-service env prefixes, defaults, validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsConfigDict

from gpuplane_core.settings import ServiceSettings


class ControllerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLANE_CONTROLLER_")

    http_port: int = 8080
    grpc_port: int = 9090
    resync_seconds: float = 30.0


class LensSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="GPUPLANE_LENS_")


def test_prefix_selects_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLANE_CONTROLLER_HTTP_PORT", "8181")
    monkeypatch.setenv("GPUPLANE_CONTROLLER_LOG_JSON", "false")
    monkeypatch.setenv("GPUPLANE_CONTROLLER_RESYNC_SECONDS", "5")
    monkeypatch.setenv("GPUPLANE_LENS_HTTP_PORT", "7000")
    monkeypatch.setenv("HTTP_PORT", "1")  # unprefixed: ignored by subclasses
    settings = ControllerSettings()
    assert settings.http_port == 8181
    assert settings.grpc_port == 9090
    assert settings.log_json is False
    assert settings.resync_seconds == 5.0


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLANE_LENS_HTTP_PORT", "7000")
    monkeypatch.setenv("GPUPLANE_LENS_GRPC_PORT", "7001")
    settings = LensSettings()  # type: ignore[call-arg]  # ports come from the environment
    assert (settings.http_host, settings.http_port, settings.grpc_port) == ("0.0.0.0", 7000, 7001)
    assert (settings.log_level, settings.log_json, settings.kubeconfig) == ("INFO", True, None)
    assert settings.max_request_bytes == 10 * 1024 * 1024


def test_ports_required_without_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPLANE_LENS_HTTP_PORT", raising=False)
    monkeypatch.delenv("GPUPLANE_LENS_GRPC_PORT", raising=False)
    with pytest.raises(ValidationError, match="http_port"):
        LensSettings()  # type: ignore[call-arg]  # ports come from the environment


@pytest.mark.parametrize("port", ["0", "65536", "-1"])
def test_port_range_enforced_even_when_overridden(monkeypatch: pytest.MonkeyPatch, port: str) -> None:
    monkeypatch.setenv("GPUPLANE_CONTROLLER_GRPC_PORT", port)
    with pytest.raises(ValidationError, match="between 1 and 65535"):
        ControllerSettings()


def test_log_level_normalised_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLANE_CONTROLLER_LOG_LEVEL", "debug")
    assert ControllerSettings().log_level == "DEBUG"
    monkeypatch.setenv("GPUPLANE_CONTROLLER_LOG_LEVEL", "chatty")
    with pytest.raises(ValidationError, match="log_level"):
        ControllerSettings()


def test_unknown_variables_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLANE_CONTROLLER_NOT_A_SETTING", "x")
    assert ControllerSettings(kubeconfig="/tmp/kc").kubeconfig == "/tmp/kc"
