"""Inputs of the cluster use cases, as the API layer hands them over."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Registration:
    name: str | None
    description: str | None
    kubeconfig: bytes
    proxy: str | None
    gateway_provider: str | None
    gateway_public_url: str | None
    gateway_port: int | None
    gateway_authz_host: str | None
    inotify_max_user_instances: int | None
    draft: bool


@dataclass
class SettingsUpdate:
    """Only the fields present in the PATCH body (``fields``) are applied."""

    fields: dict[str, Any]
