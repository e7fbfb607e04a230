"""The controller's TokenReviewer: KubeTokenReviewer behind the shared cache, with an
unreachable apiserver answered 503 (instead of an internal error) for uncached tokens."""

from __future__ import annotations

import aiohttp
from kubernetes_asyncio import client

from gpuplane_core.auth import CachedReviewer, Identity
from gpuplane_core.errors import NotReady
from gpuplane_core.k8s.tokenreview import KubeTokenReviewer


class ControllerReviewer:
    def __init__(self, api: client.ApiClient, ttl: float) -> None:
        self._cached = CachedReviewer(KubeTokenReviewer(api), ttl=ttl)

    async def review(self, token: str) -> Identity:
        try:
            return await self._cached.review(token)
        except (TimeoutError, aiohttp.ClientError, OSError):
            raise NotReady(
                "cannot verify the token: Kubernetes API unreachable; retry", code="apiserver_unreachable"
            ) from None
