"""Reads behind GET /api/cluster/overview: all lists concurrently, disk from kubelet Summary (cached)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes_asyncio import client

from gpuplane_core.errors import GpuplaneError, NotFound
from gpuplane_lens.domain import overview as domain
from gpuplane_lens.domain.overview import DiskUsage
from gpuplane_lens.k8s.clients import list_items, request_json
from gpuplane_lens.k8s.node_cache import NodeCache

_SUMMARY_CONCURRENCY = 32


async def _optional_list(api: client.ApiClient, path: str, timeout: float) -> list[dict[str, Any]]:
    """A list of an API that may not be served (DRA off): missing means empty."""
    try:
        return await list_items(api, path, timeout)
    except NotFound:
        return []


class DiskCache:
    """kubelet Summary figures per cluster, stale-while-revalidate.

    Asking every node's kubelet costs one proxied call per node, so the figures are
    reused for ``ttl`` seconds and refreshed in the background after that; only the very
    first overview of a cluster waits for them. One node is asked first: when its kubelet
    does not serve the Summary API (or the proxy is refused) the cluster's disk is unknown
    and the other nodes are not asked.
    """

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, dict[str, DiskUsage] | None]] = {}
        self._refreshing: dict[str, asyncio.Task[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(
        self, cluster_id: str, api: client.ApiClient, node_names: Sequence[str], timeout: float
    ) -> dict[str, DiskUsage] | None:
        entry = self._entries.get(cluster_id)
        if entry is not None:
            if time.monotonic() - entry[0] >= self.ttl and cluster_id not in self._refreshing:
                task = asyncio.create_task(self._refresh(cluster_id, api, list(node_names), timeout))
                self._refreshing[cluster_id] = task
                task.add_done_callback(lambda _t: self._refreshing.pop(cluster_id, None))
            return entry[1]
        async with self._locks.setdefault(cluster_id, asyncio.Lock()):
            if cluster_id not in self._entries:
                await self._refresh(cluster_id, api, list(node_names), timeout)
        return self._entries[cluster_id][1]

    async def _refresh(
        self, cluster_id: str, api: client.ApiClient, names: list[str], timeout: float
    ) -> None:
        disk = await _fetch_disk(api, names, timeout)
        self._entries[cluster_id] = (time.monotonic(), disk)

    def forget(self, cluster_id: str) -> None:
        self._entries.pop(cluster_id, None)
        task = self._refreshing.pop(cluster_id, None)
        if task is not None:
            task.cancel()


async def _summary(api: client.ApiClient, name: str, timeout: float) -> DiskUsage | None:
    try:
        summary = await request_json(api, "GET", f"/api/v1/nodes/{name}/proxy/stats/summary", timeout=timeout)
    except GpuplaneError:
        return None
    return domain.disk_from_summary(summary) if isinstance(summary, Mapping) else None


async def _fetch_disk(api: client.ApiClient, names: list[str], timeout: float) -> dict[str, DiskUsage] | None:
    if not names:
        return None
    first = await _summary(api, names[0], timeout)
    if first is None:
        return None
    out: dict[str, DiskUsage] = {names[0]: first}
    sem = asyncio.Semaphore(_SUMMARY_CONCURRENCY)

    async def one(name: str) -> None:
        async with sem:
            usage = await _summary(api, name, timeout)
        if usage is not None:
            out[name] = usage

    await asyncio.gather(*(one(n) for n in names[1:]))
    return out


async def memory_usage_percent(api: client.ApiClient, service: str | None, timeout: float) -> float | None:
    """Average node memory usage from the cluster's Prometheus (``ns/name:port``) via the API proxy."""
    if not service:
        return None
    ns, _, name_port = service.partition("/")
    query = "avg((1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes) * 100)"
    try:
        answer = await request_json(
            api,
            "GET",
            f"/api/v1/namespaces/{ns}/services/{name_port}/proxy/api/v1/query",
            query={"query": query},
            timeout=timeout,
        )
        return float(answer["data"]["result"][0]["value"][1])
    except (GpuplaneError, KeyError, IndexError, TypeError, ValueError):
        return None


async def fetch_overview(
    cluster_id: str,
    api: client.ApiClient,
    node_cache: NodeCache,
    disk_cache: DiskCache,
    prometheus_service: str | None,
    timeout: float,
) -> dict[str, Any]:
    nodes, pods, deployments, daemonsets, statefulsets, slices = await asyncio.gather(
        node_cache.snapshot(),
        list_items(
            api, "/api/v1/pods", timeout, fieldSelector="status.phase!=Succeeded,status.phase!=Failed"
        ),
        list_items(api, "/apis/apps/v1/deployments", timeout),
        list_items(api, "/apis/apps/v1/daemonsets", timeout),
        list_items(api, "/apis/apps/v1/statefulsets", timeout),
        _optional_list(api, "/apis/resource.k8s.io/v1/resourceslices", timeout),
    )
    ready = [str(n["metadata"]["name"]) for n in nodes if domain.node_ready(n)]
    disk, memory = await asyncio.gather(
        disk_cache.get(cluster_id, api, ready, min(timeout, 5.0)),
        memory_usage_percent(api, prometheus_service, min(timeout, 5.0)),
    )
    workloads = {"Deployment": deployments, "DaemonSet": daemonsets, "StatefulSet": statefulsets}
    return domain.overview(nodes, slices, pods, workloads, disk, memory)
