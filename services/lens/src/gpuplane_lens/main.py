"""Lens cluster manager: app factory and console entry point."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import yaml
from fastapi import FastAPI

from gpuplane_core.app import create_app, serve
from gpuplane_lens.api.bootstrap import router as bootstrap_router
from gpuplane_lens.api.clusters import router as clusters_router
from gpuplane_lens.domain.versions import StackProfile, parse_profile
from gpuplane_lens.k8s.clients import ClusterClients
from gpuplane_lens.k8s.node_cache import NodeCaches
from gpuplane_lens.k8s.overview import DiskCache
from gpuplane_lens.service.bootstrap import Bootstrapper
from gpuplane_lens.service.clusters import ClusterService
from gpuplane_lens.service.hosts import lens_hosts
from gpuplane_lens.service.operations import ClusterOperations
from gpuplane_lens.settings import Settings
from gpuplane_lens.software.downloads import Downloads
from gpuplane_lens.store.crypto import KeyRing, load_or_create_key_file
from gpuplane_lens.store.db import Store, make_engine, migrate
from gpuplane_lens.store.jobs import JobStore

SERVICE = "lens"
logger = logging.getLogger(__name__)


def load_profile(settings: Settings) -> StackProfile:
    return parse_profile(yaml.safe_load(settings.versions_file.read_text()))


def key_ring(settings: Settings) -> KeyRing:
    keys = settings.encryption_keys or load_or_create_key_file(settings.resolved_key_file)
    return KeyRing(keys)


async def open_store(settings: Settings) -> Store:
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    engine = make_engine(settings.resolved_database_url)
    await asyncio.to_thread(migrate, engine)
    store = Store(engine, key_ring(settings))
    rotated = await store.rotate_keys()
    if rotated:
        logger.info("re-encrypted %d kubeconfigs with the newest key", rotated)
    return store


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    # kubernetes_asyncio logs request and response bodies at DEBUG; Secrets travel in them.
    logging.getLogger("kubernetes_asyncio").setLevel(max(logging.INFO, logging.getLogger().level))
    profile = load_profile(settings)
    store = await open_store(settings)
    clients = ClusterClients(store.kubeconfig, settings.data_dir / "kube-tmp")
    downloads = Downloads(settings.data_dir / "cache", settings.download_timeout_s)
    http = aiohttp.ClientSession()
    node_caches = NodeCaches(settings.node_cache_idle_s, settings.request_timeout_s)
    clusters = ClusterService(
        store=store,
        clients=clients,
        profile=profile,
        downloads=downloads,
        disk_cache=DiskCache(settings.disk_cache_s),
        node_caches=node_caches,
        lens_hosts=lens_hosts(settings.lens_hosts),
        probe_timeout=settings.probe_timeout_s,
        request_timeout=settings.request_timeout_s,
    )
    app.state.store = store
    app.state.clusters = clusters
    app.state.operations = ClusterOperations(clusters, settings, http)
    bootstrap = Bootstrapper(JobStore(store), settings)
    reconciled = await bootstrap.reconcile()
    if reconciled:
        logger.warning("marked %d bootstrap jobs of an earlier Lens process failed", reconciled)
    app.state.bootstrap = bootstrap
    try:
        yield
    finally:
        await bootstrap.close()
        await downloads.close()
        await node_caches.close()
        await clients.close()
        await http.close()
        store.close()


def build_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = create_app(
        service=SERVICE,
        title="Lens cluster manager",
        settings=settings,
        error_style="problem",
        lifespan=lifespan,
    )
    app.include_router(clusters_router)
    app.include_router(bootstrap_router)
    return app


def main() -> None:
    settings = Settings()
    serve(build_app(settings), settings, SERVICE)
