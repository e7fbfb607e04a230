"""The cluster and session records Lens keeps, independent of how they are stored."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

ProxyMode = Literal["auto", "custom"]
DEFAULT_INOTIFY_MAX_USER_INSTANCES = 8192


@dataclass(frozen=True)
class Proxy:
    mode: ProxyMode = "auto"
    http_proxy: str = ""
    https_proxy: str = ""
    no_proxy: str = ""


@dataclass(frozen=True)
class HfSecretRef:
    namespace: str
    name: str


@dataclass(frozen=True)
class Gateway:
    provider: str | None = None
    namespace_prefix: str | None = None
    """What the user asked for (without the id suffix); None means the default ``lens-gateway``."""
    public_url: str | None = None
    port: int | None = None
    authz_host: str | None = None


@dataclass(frozen=True)
class ClusterRecord:
    """One registered cluster. The kubeconfig lives beside it (encrypted) and never in here."""

    id: str
    name: str
    description: str
    draft: bool
    created_at: datetime
    updated_at: datetime
    proxy: Proxy = field(default_factory=Proxy)
    gateway: Gateway = field(default_factory=Gateway)
    inotify_max_user_instances: int = DEFAULT_INOTIFY_MAX_USER_INSTANCES
    hf_token_secret: HfSecretRef | None = None
    hf_namespace_created: bool = False
    """Lens created the HF secret's namespace, so deleting the cluster may delete it."""
    version: int = 1
    """Optimistic-locking counter: every update must name the version it read."""


@dataclass(frozen=True)
class SessionRecord:
    id: str
    cluster_id: str
    created_at: datetime
    active: bool = True


def new_cluster_id() -> str:
    """The stable short id (8 hex characters) that also suffixes the gateway namespace."""
    return secrets.token_hex(4)
