"""Request bodies. Unknown keys are refused (422) so typos never pass silently."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClusterSettingsUpdate(_Strict):
    name: str | None = None
    description: str | None = None
    proxy: dict[str, Any] | None = None
    # Kept for compatibility and ignored: versions come from the stack profile.
    llmDRef: str | None = None
    llmDBenchmarkRef: str | None = None
    routerVersion: str | None = None
    gieVersion: str | None = None
    ippVersion: str | None = None
    gatewayProvider: str | None = None
    gatewayNamespace: str | None = None
    gatewayPort: int | None = None
    gatewayPublicUrl: str | None = None
    gatewayAuthzHost: str | None = None
    inotifyMaxUserInstances: int | None = None
    draft: bool | None = None


IGNORED_VERSION_FIELDS = {"llmDRef", "llmDBenchmarkRef", "routerVersion", "gieVersion", "ippVersion"}


class HfTokenSecretCreate(_Strict):
    namespace: str | None = None
    name: str | None = None
    token: str | None = None


class HfTokenSecretUpdate(_Strict):
    namespace: str | None = None
    name: str | None = None
    token: str | None = None


class PrepullRequest(_Strict):
    accelerators: list[str] = []


class NodeNames(_Strict):
    names: list[Any] | None = None
