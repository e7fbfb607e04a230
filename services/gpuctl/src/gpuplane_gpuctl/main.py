"""gpuctl API: app factory and console entry point."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gpuplane_core.app import create_app, serve
from gpuplane_core.k8s.client import load_api_client
from gpuplane_gpuctl.api import base, jobs, namespaces, nodes, pools, quotas
from gpuplane_gpuctl.grpc.capacity import CapacityClient
from gpuplane_gpuctl.k8s.cluster import ClusterRepo
from gpuplane_gpuctl.k8s.inventory import InventoryCache
from gpuplane_gpuctl.k8s.jobs import JobRepo
from gpuplane_gpuctl.k8s.pod_cache import PodCache
from gpuplane_gpuctl.settings import Settings

SERVICE = "gpuctl"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    api = await load_api_client(settings.kubeconfig)
    app.state.jobs = JobRepo(api)
    await app.state.jobs.ensure_priority_classes()
    app.state.pod_cache = PodCache(api)
    app.state.pod_cache.start()
    app.state.cluster = ClusterRepo(api)
    app.state.inventory = InventoryCache(api)
    app.state.inventory.start()
    app.state.capacity = CapacityClient(settings.controller_address) if settings.controller_address else None
    try:
        yield
    finally:
        await app.state.pod_cache.stop()
        await app.state.inventory.stop()
        if app.state.capacity is not None:
            await app.state.capacity.close()
        await api.close()


def _readiness(app: FastAPI) -> str | None:
    cache = getattr(app.state, "pod_cache", None)
    if cache is None:
        return "starting"
    if not cache.health.healthy:
        return cache.health.error or "pod watch not synced"
    inv = app.state.inventory
    if not inv.healthy:
        return inv.node_health.error or inv.pod_health.error or "node/pod watch not synced"
    return None


def build_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = create_app(
        service=SERVICE,
        title="gpuctl API",
        settings=settings,
        error_style="simple",
        lifespan=lifespan,
        readiness=_readiness,
        # The gpuctl spec documents 400/404/409/500: server-side failures are all 500.
        status_map={502: 500, 503: 500, 504: 500},
    )
    app.include_router(base.router)
    app.include_router(jobs.router)
    app.include_router(pools.router)
    app.include_router(nodes.router)
    app.include_router(quotas.router)
    app.include_router(namespaces.router)
    return app


def main() -> None:
    settings = Settings()
    serve(build_app(settings), settings, SERVICE)
