"""Per-cluster operations: software downloads, image prepull, CRDs, version check, overview, discovery."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import aiohttp

from gpuplane_core.errors import GpuplaneError, NotFound
from gpuplane_lens.domain import prepull as prepull_domain
from gpuplane_lens.domain.versions import supported
from gpuplane_lens.k8s import crds, discovery, prepull
from gpuplane_lens.k8s.overview import fetch_overview
from gpuplane_lens.k8s.probe import version
from gpuplane_lens.service.clusters import LLM_D_BENCHMARK_REPO, LLM_D_REPO, ClusterService
from gpuplane_lens.settings import Settings


class ClusterOperations:
    def __init__(self, clusters: ClusterService, settings: Settings, http: aiohttp.ClientSession) -> None:
        self.clusters = clusters
        self.settings = settings
        self.http = http

    @property
    def profile(self) -> Any:
        return self.clusters.profile

    # -- software downloads ---------------------------------------------------------------------

    def _downloads_view(self) -> dict[str, Any]:
        d = self.clusters.downloads
        return {
            "llmD": d.status(LLM_D_REPO, self.profile.llm_d).to_json(),
            "llmDBenchmark": d.status(LLM_D_BENCHMARK_REPO, self.profile.llm_d_benchmark).to_json(),
        }

    async def start_downloads(self, cluster_id: str) -> dict[str, Any]:
        await self.clusters.store.get_cluster(cluster_id)
        d = self.clusters.downloads
        d.start(LLM_D_REPO, self.settings.llm_d_repo_url, self.profile.llm_d)
        d.start(LLM_D_BENCHMARK_REPO, self.settings.llm_d_benchmark_repo_url, self.profile.llm_d_benchmark)
        return self._downloads_view()

    async def downloads(self, cluster_id: str) -> dict[str, Any]:
        await self.clusters.store.get_cluster(cluster_id)
        return self._downloads_view()

    # -- image prepull --------------------------------------------------------------------------

    async def start_prepull(self, cluster_id: str, accelerators: list[str]) -> dict[str, Any]:
        await self.clusters.store.get_cluster(cluster_id)
        images = prepull_domain.images_for(self.profile, accelerators)
        api = await self.clusters.clients.get(cluster_id)
        return await prepull.start(
            api,
            self.settings.prepull_namespace,
            images,
            self.settings.prepull_helper_image,
            self.settings.request_timeout_s,
        )

    async def prepull_status(self, cluster_id: str) -> dict[str, Any]:
        await self.clusters.store.get_cluster(cluster_id)
        api = await self.clusters.clients.get(cluster_id)
        return await prepull.status(api, self.settings.prepull_namespace, self.settings.request_timeout_s)

    # -- CRDs -----------------------------------------------------------------------------------

    def _bundle_urls(self) -> dict[str, str]:
        p = self.profile
        return {
            "gateway_api": self.settings.gateway_api_crds_url.format(version=p.gateway_api),
            "gateway_api_inference_extension": self.settings.gateway_api_inference_extension_crds_url.format(
                version=p.gateway_api_inference_extension
            ),
        }

    async def apply_crds(self, cluster_id: str) -> dict[str, Any]:
        await self.clusters.store.get_cluster(cluster_id)
        api = await self.clusters.clients.get(cluster_id)
        t = self.settings.request_timeout_s
        return {
            bundle: await crds.install_bundle(api, self.http, bundle, url, t)
            for bundle, url in self._bundle_urls().items()
        }

    async def crd_status(self, cluster_id: str) -> dict[str, str]:
        await self.clusters.store.get_cluster(cluster_id)
        api = await self.clusters.clients.get(cluster_id)
        t = self.settings.request_timeout_s
        return {
            bundle: "ready" if await crds.bundle_ready(api, bundle, t) else "missing"
            for bundle in crds.REQUIRED_CRDS
        }

    # -- version check --------------------------------------------------------------------------

    async def kubernetes_version(self, cluster_id: str) -> dict[str, Any]:
        await self.clusters.store.get_cluster(cluster_id)
        minimum = self.profile.min_k8s_version
        try:
            api = await self.clusters.clients.get(cluster_id)
            short, git = await version(api, self.settings.probe_timeout_s)
        except NotFound:
            raise
        except (GpuplaneError, ValueError, KeyError, TypeError):
            return {"reachable": False, "version": None, "min_k8s_version": minimum, "supported": False}
        return {
            "reachable": True,
            "version": short,
            "min_k8s_version": minimum,
            "supported": git is not None and supported(git, minimum),
        }

    # -- overview and discovery -----------------------------------------------------------------

    async def overview(self, cluster_id: str) -> dict[str, Any]:
        rec = await self.clusters.store.get_cluster(cluster_id)
        api = await self.clusters.clients.get(rec.id)
        state, kubernetes = await asyncio.gather(
            self.clusters.probe(rec.id),
            fetch_overview(
                rec.id,
                api,
                await self.clusters.node_caches.get(rec.id, api),
                self.clusters.disk_cache,
                self.settings.prometheus_service,
                self.settings.request_timeout_s,
            ),
        )
        view = self.clusters.view(rec, state)
        return {
            "cluster": view,
            "fetchedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "kubernetes": kubernetes,
        }

    async def planning(self, session_id: str, resource: str) -> dict[str, Any]:
        if resource not in discovery.PLANNING_READS:
            raise NotFound(
                f"unknown planning discovery resource {resource!r}", code="unknown_discovery_resource"
            )
        cluster_id = await self.clusters.cluster_of_session(session_id)
        try:
            api = await self.clusters.clients.get(cluster_id)
        except NotFound:
            raise
        except Exception:
            return {"result": None}
        return {"result": await discovery.planning_read(api, resource, self.settings.request_timeout_s)}
