"""An informer over nodes and unfinished pods, so GET /nodes and /pools answer from memory.

With 1,000 nodes and 10,000 pods a fresh list per request costs seconds; the
watches keep one small row per object (raw JSON dicts in, no model building).
Node writes made by gpuctl itself are put into the cache right away, so a
label change is visible to the next read.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kubernetes_asyncio import client

from gpuplane_core.errors import NotReady
from gpuplane_core.k8s.raw import list_json
from gpuplane_core.k8s.watch import WatchHealth, resumable_watch
from gpuplane_gpuctl.domain.inventory import NodeRow, PodUse, node_row, pod_use

_UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"


class InventoryCache:
    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.node_health = WatchHealth()
        self.pod_health = WatchHealth()
        self.nodes: dict[str, NodeRow] = {}
        self.pods: dict[tuple[str, str], PodUse] = {}
        self._node_rv: dict[str, int] = {}
        self._nodes_synced = asyncio.Event()
        self._pods_synced = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._run_nodes(), name="gpuctl-node-cache"),
            asyncio.create_task(self._run_pods(), name="gpuctl-usage-cache"),
        ]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    @property
    def healthy(self) -> bool:
        return self.node_health.healthy and self.pod_health.healthy

    async def wait_synced(self, timeout: float = 30.0) -> None:
        try:
            await asyncio.wait_for(
                asyncio.gather(self._nodes_synced.wait(), self._pods_synced.wait()), timeout
            )
        except TimeoutError:
            err = self.node_health.error or self.pod_health.error or "still listing"
            raise NotReady(f"node/pod cache not synced: {err}") from None

    async def _run_nodes(self) -> None:
        async for ev in resumable_watch(list_json(self.core.list_node), health=self.node_health):
            if ev.type == "RELISTED":
                self.nodes, self._node_rv = {}, {}
                for n in ev.items:
                    self.put_node(n)
                self._nodes_synced.set()
            elif ev.type == "DELETED":
                name = (ev.object.get("metadata") or {}).get("name", "")
                self.nodes.pop(name, None)
                self._node_rv.pop(name, None)
            else:
                self.put_node(ev.object)

    async def _run_pods(self) -> None:
        # A pod that finishes stops matching the field selector and arrives as DELETED.
        async for ev in resumable_watch(
            list_json(self.core.list_pod_for_all_namespaces),
            field_selector=_UNFINISHED,
            health=self.pod_health,
        ):
            if ev.type == "RELISTED":
                pods = {}
                for p in ev.items:
                    u = pod_use(p)
                    if u is not None:
                        pods[(u.namespace, u.name)] = u
                self.pods = pods
                self._pods_synced.set()
                continue
            meta = ev.object.get("metadata") or {}
            key = (meta.get("namespace", ""), meta.get("name", ""))
            u = None if ev.type == "DELETED" else pod_use(ev.object)
            if u is None:
                self.pods.pop(key, None)
            else:
                self.pods[key] = u

    def put_node(self, node: dict[str, Any]) -> None:
        """Store a node unless the cache already holds a newer version (our own write came first)."""
        meta = node.get("metadata") or {}
        name = meta.get("name", "")
        try:
            rv = int(meta.get("resourceVersion") or 0)
        except ValueError:
            rv = 0
        if rv and rv < self._node_rv.get(name, 0):
            return
        self._node_rv[name] = rv
        self.nodes[name] = node_row(node)

    def node_rows(self) -> list[NodeRow]:
        return list(self.nodes.values())

    def pod_uses(self) -> list[PodUse]:
        return list(self.pods.values())
