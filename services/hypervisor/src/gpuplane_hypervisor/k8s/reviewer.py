"""The TokenReview client for the limiter endpoints."""

from __future__ import annotations

import logging
from typing import Any

from kubernetes_asyncio.config import ConfigException

from gpuplane_core.auth import CachedReviewer, Identity, TokenReviewer
from gpuplane_core.errors import NotReady
from gpuplane_core.k8s.client import load_api_client
from gpuplane_core.k8s.tokenreview import KubeTokenReviewer
from gpuplane_hypervisor.settings import Settings

log = logging.getLogger(__name__)


class NoApiReviewer:
    """Used when no Kubernetes API is configured: token endpoints answer 503 with the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def review(self, token: str) -> Identity:
        raise NotReady(f"cannot review tokens: {self.reason}")


async def open_reviewer(settings: Settings) -> tuple[TokenReviewer, Any | None]:
    """(reviewer, api client to close) — the API client is None when none could be configured."""
    try:
        api = await load_api_client(settings.kubeconfig)
    except (ConfigException, OSError) as e:
        log.error("no Kubernetes API for TokenReview: %s", e)
        return NoApiReviewer(str(e)), None
    inner = KubeTokenReviewer(api, audiences=settings.token_audiences)
    return CachedReviewer(inner, ttl=settings.review_cache_seconds), api
