"""Per-cluster node cache: one list, then a watch, kept as plain dicts.

The overview of a 1,000-node cluster must answer well under a second; relisting every
node on every request costs the apiserver and Lens seconds (megabytes of JSON). The
cache lists once, follows a raw watch (no model deserialisation), resumes from the last
resourceVersion, relists on 410 Gone, and stops itself when nobody asked for it lately.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from gpuplane_core.backoff import Backoff
from gpuplane_core.errors import GpuplaneError
from gpuplane_lens.k8s.clients import TRANSPORT_ERRORS, request_json, transport_error

logger = logging.getLogger(__name__)

_WATCH_SECONDS = 240


class _Gone(Exception):
    """The watch's resourceVersion is too old (410): relist."""


class NodeCache:
    def __init__(self, api: client.ApiClient, timeout: float) -> None:
        self.api = api
        self.timeout = timeout
        self.nodes: dict[str, dict[str, Any]] = {}
        self.healthy = False
        self.last_used = time.monotonic()
        self._synced = asyncio.Event()
        self._attempted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._error: GpuplaneError | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="lens-node-cache")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def snapshot(self) -> list[dict[str, Any]]:
        """The current nodes; waits for the first list (or raises what it failed with)."""
        self.last_used = time.monotonic()
        self.start()
        if not self._synced.is_set():
            try:
                await asyncio.wait_for(self._attempted.wait(), self.timeout)
            except TimeoutError:
                raise transport_error(TimeoutError()) from None
            if not self._synced.is_set():
                raise self._error or transport_error(ConnectionError())
        if not self.healthy:
            # The watch is broken: answer from a fresh list rather than from a stale cache.
            page = await request_json(self.api, "GET", "/api/v1/nodes", timeout=self.timeout)
            return list(page.get("items") or [])
        return list(self.nodes.values())

    async def _run(self) -> None:
        delays = Backoff().delays()
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    page = await request_json(self.api, "GET", "/api/v1/nodes", timeout=self.timeout)
                    self.nodes = {n["metadata"]["name"]: n for n in page.get("items") or []}
                    rv = str(page["metadata"]["resourceVersion"])
                    self.healthy = True
                    self._error = None
                    self._synced.set()
                    self._attempted.set()
                rv = await self._watch(rv)
                delays = Backoff().delays()
                continue  # the server ended the watch: resume from rv at once
            except _Gone:
                rv = None
                continue
            except GpuplaneError as err:
                self._error = err
                self.healthy = False
            except (TimeoutError, *TRANSPORT_ERRORS, ValueError, KeyError) as err:
                self._error = transport_error(err)
                self.healthy = False
                logger.debug("node watch broken: %s", type(err).__name__)
            finally:
                self._attempted.set()
            await asyncio.sleep(next(delays))

    async def _watch(self, rv: str) -> str:
        query = [
            ("watch", "true"),
            ("resourceVersion", rv),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(_WATCH_SECONDS)),
        ]
        resp = await self.api.call_api(
            "/api/v1/nodes",
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(connect=self.timeout, sock_read=_WATCH_SECONDS + 30),
        )
        try:
            if resp.status == 410:
                raise _Gone
            if resp.status != 200:
                raise ValueError(f"watch answered HTTP {resp.status}")
            self.healthy = True
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                kind = event.get("type")
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone
                    raise ValueError(f"watch error {obj.get('code')}")
                new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                if new_rv:
                    rv = str(new_rv)
                name = (obj.get("metadata") or {}).get("name")
                if kind in ("ADDED", "MODIFIED") and name:
                    self.nodes[name] = obj
                elif kind == "DELETED" and name:
                    self.nodes.pop(name, None)
            return rv
        finally:
            resp.release()


class NodeCaches:
    """NodeCache per cluster id; idle caches stop their watch."""

    def __init__(self, idle_s: float, timeout: float) -> None:
        self.idle_s = idle_s
        self.timeout = timeout
        self._caches: dict[str, NodeCache] = {}

    async def get(self, cluster_id: str, api: client.ApiClient) -> NodeCache:
        await self._reap()
        cache = self._caches.get(cluster_id)
        if cache is None or cache.api is not api:
            if cache is not None:
                await cache.stop()
            cache = self._caches[cluster_id] = NodeCache(api, self.timeout)
        return cache

    async def _reap(self) -> None:
        now = time.monotonic()
        for cid, cache in list(self._caches.items()):
            if now - cache.last_used > self.idle_s:
                await self.forget(cid)

    async def forget(self, cluster_id: str) -> None:
        cache = self._caches.pop(cluster_id, None)
        if cache is not None:
            await cache.stop()

    async def close(self) -> None:
        for cid in list(self._caches):
            await self.forget(cid)
