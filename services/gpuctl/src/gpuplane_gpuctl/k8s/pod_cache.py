"""An informer over every gpuctl pod, so GET /jobs answers from memory.

Listing tens of thousands of pods from the apiserver per request would take
seconds. The watch keeps one small row per pod; events stay raw JSON dicts
(building kubernetes_asyncio models for every status change would block the
event loop during bursts), and the sorted key list changes only when pods
come or go, so paging is a slice.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging

from kubernetes_asyncio import client

from gpuplane_core.errors import NotReady
from gpuplane_core.k8s.raw import list_json
from gpuplane_core.k8s.watch import WatchHealth, resumable_watch
from gpuplane_gpuctl.domain.manifests import L_TYPE
from gpuplane_gpuctl.domain.views import PodRow, pod_row

log = logging.getLogger(__name__)

Key = tuple[str, str]


class PodCache:
    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.health = WatchHealth()
        self._rows: dict[Key, PodRow] = {}
        self._keys: list[Key] = []  # sorted by (namespace, pod)
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="gpuctl-pod-cache")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def wait_synced(self, timeout: float = 30.0) -> None:
        try:
            await asyncio.wait_for(self._synced.wait(), timeout)
        except TimeoutError:
            raise NotReady(f"pod cache not synced: {self.health.error or 'still listing'}") from None

    async def _run(self) -> None:
        list_raw = list_json(self.core.list_pod_for_all_namespaces)
        async for ev in resumable_watch(list_raw, label_selector=L_TYPE, health=self.health):
            if ev.type == "RELISTED":
                rows = (pod_row(p) for p in ev.items)
                self._rows = {(r.namespace, r.pod): r for r in rows}
                self._keys = sorted(self._rows)
                self._synced.set()
                continue
            meta = ev.object.get("metadata") or {}
            key = (meta.get("namespace", ""), meta.get("name", ""))
            if ev.type == "DELETED":
                if self._rows.pop(key, None) is not None:
                    i = bisect.bisect_left(self._keys, key)
                    if i < len(self._keys) and self._keys[i] == key:
                        del self._keys[i]
            else:
                if key not in self._rows:
                    bisect.insort(self._keys, key)
                self._rows[key] = pod_row(ev.object)

    def rows(self) -> list[PodRow]:
        rows = self._rows
        return [rows[k] for k in self._keys]
