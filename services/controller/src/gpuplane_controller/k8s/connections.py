"""TensorFusionConnections: one shared informer with a registry of waiting requests
(`GET /api/connection`), and the leader's reconciler that points each connection at a
ready worker pod of its workload (see domain/connections.py for the rules).

Every waiting request is a future in `ConnectionHub._waiters`, resolved by the informer's
events: any number of concurrent waiters cost one watch. When the watch breaks, every
waiter is answered 503 at once and new requests get 503 until it is re-established."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_controller.domain.connections import (
    desired_status,
    owner_uid,
    running_url,
    status_differs,
    worker_of,
)
from gpuplane_controller.k8s import sources
from gpuplane_controller.k8s.leader import AlwaysLeader, LeaderElector
from gpuplane_core.auth import Identity
from gpuplane_core.errors import NotFound, NotReady, Timeout, Unauthorized
from gpuplane_core.k8s.errors import translate_api_exception
from gpuplane_core.k8s.raw import call_json
from gpuplane_core.k8s.watch import WatchEvent, WatchHealth, resumable_watch

log = logging.getLogger(__name__)

PLURAL = "tensorfusionconnections"
Key = tuple[str, str]  # (namespace, name)


class _NotifyingHealth(WatchHealth):
    """WatchHealth that reports flips of `healthy` (resumable_watch only sets the field)."""

    def __setattr__(self, name: str, value: Any) -> None:
        before = self.__dict__.get(name)
        super().__setattr__(name, value)
        callback = self.__dict__.get("on_flip")
        if name == "healthy" and callback is not None and before != value:
            callback(bool(value))


def _key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])


def _settle(fut: asyncio.Future[str], result: str | BaseException) -> None:
    if fut.done():
        return
    if isinstance(result, BaseException):
        fut.set_exception(result)
        fut.exception()  # retrieved: the waiter may have gone away already
    else:
        fut.set_result(result)


class ConnectionHub:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.cache: dict[Key, dict[str, Any]] = {}
        self.synced = False
        self.health = _NotifyingHealth()
        self.health.__dict__["on_flip"] = self._on_health
        self._waiters: dict[Key, set[asyncio.Future[str]]] = {}
        self.listeners: list[Callable[[Key], None]] = []  # called on every change of a connection
        self._task: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        async for ev in resumable_watch(sources.cluster_custom(self.api, PLURAL), health=self.health):
            try:
                self._on_event(ev)
            except Exception:  # one bad object must not stop the informer
                log.exception("connection informer failed to handle an event")

    def _on_health(self, healthy: bool) -> None:
        if healthy:
            return
        log.warning("connection watch broken: %s", self.health.error)
        broken = NotReady(
            "the controller's watch on TensorFusionConnections is broken; retry", code="watch_broken"
        )
        for futs in self._waiters.values():
            for f in futs:
                _settle(f, broken)

    def _on_event(self, ev: WatchEvent) -> None:
        if ev.type == "RELISTED":
            old = self.cache
            self.cache = {_key(o): o for o in ev.items}
            self.synced = True
            for key in set(old) | set(self.cache):
                self._changed(key)
            return
        key = _key(ev.object)
        if ev.type == "DELETED":
            self.cache.pop(key, None)
        else:
            self.cache[key] = ev.object
        self._changed(key)

    def _changed(self, key: Key) -> None:
        obj = self.cache.get(key)
        futs = self._waiters.get(key)
        if futs:
            if obj is None:
                result: str | BaseException | None = NotFound(
                    f"TensorFusionConnection {key[0]}/{key[1]} was deleted"
                )
            else:
                result = running_url(obj)
            if result is not None:
                for f in futs:
                    _settle(f, result)
        for listener in self.listeners:
            listener(key)

    async def _lookup(self, key: Key) -> dict[str, Any]:
        obj = self.cache.get(key)
        if obj is not None:
            return obj
        # Not (yet) in the cache: created a moment ago, or really absent. Ask the apiserver once.
        try:
            get = self.custom.get_namespaced_custom_object
            fresh = await call_json(get, sources.GROUP, sources.VERSION, key[0], PLURAL, key[1])
        except ApiException as e:
            if e.status == 404:
                raise NotFound(f"TensorFusionConnection {key[0]}/{key[1]} not found", field="name") from None
            raise translate_api_exception(e) from e
        return self.cache.setdefault(key, fresh)  # the informer may have delivered it meanwhile

    async def connection_url(self, namespace: str, name: str, caller: Identity, timeout: float) -> str:
        if not self.synced or not self.health.healthy:
            raise NotReady(
                "the controller's watch on TensorFusionConnections is not established; retry",
                code="watch_broken",
            )
        key = (namespace, name)
        obj = await self._lookup(key)
        owner = owner_uid(obj)
        if owner is None or caller.pod_uid != owner:
            raise Unauthorized("the token does not belong to the pod that owns this connection")
        obj = self.cache.get(key, obj)
        url = running_url(obj)
        if url is not None:
            return url
        if not self.health.healthy:
            raise NotReady(
                "the controller's watch on TensorFusionConnections is broken; retry", code="watch_broken"
            )
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, set()).add(fut)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise Timeout(
                f"the worker of connection {namespace}/{name} was not ready within {timeout:g}s"
            ) from None
        finally:
            futs = self._waiters.get(key)
            if futs is not None:
                futs.discard(fut)
                if not futs:
                    del self._waiters[key]


class ConnectionReconciler:
    """Leader only: sets status.phase/connectionURL/workerName of every connection."""

    def __init__(self, hub: ConnectionHub, leader: LeaderElector | AlwaysLeader) -> None:
        self.hub, self.leader = hub, leader
        self.custom = hub.custom
        self.workers: dict[Key, dict[str, dict[str, Any]]] = {}  # (ns, workload) -> uid -> pod
        self._worker_of_uid: dict[str, Key] = {}
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._tasks: list[asyncio.Task[None]] = []
        hub.listeners.append(self.enqueue)

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._terms()), asyncio.ensure_future(self._work())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def enqueue(self, key: Key) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def _enqueue_workload(self, wl: Key) -> None:
        for key, obj in self.hub.cache.items():
            if key[0] == wl[0] and (obj.get("spec") or {}).get("workloadName") == wl[1]:
                self.enqueue(key)

    # ---- worker pods, fed by the controller's pod informer -----------------------------------
    def on_pod_event(self, ev: WatchEvent) -> None:
        if ev.type == "RELISTED":
            self.workers, self._worker_of_uid = {}, {}
            for p in ev.items:
                self._upsert(p)
            for key in list(self.hub.cache):
                self.enqueue(key)
            return
        uid = ev.object["metadata"]["uid"]
        old = self._worker_of_uid.pop(uid, None)
        if old is not None:
            self.workers.get(old, {}).pop(uid, None)
            self._enqueue_workload(old)
        if ev.type != "DELETED":
            new = self._upsert(ev.object)
            if new is not None and new != old:
                self._enqueue_workload(new)

    def _upsert(self, pod: dict[str, Any]) -> Key | None:
        workload = worker_of(pod)
        if workload is None:
            return None
        meta = pod["metadata"]
        wl = (str(meta.get("namespace") or ""), workload)
        self.workers.setdefault(wl, {})[meta["uid"]] = pod
        self._worker_of_uid[meta["uid"]] = wl
        return wl

    # ---- the loop ----------------------------------------------------------------------------------
    async def _terms(self) -> None:
        while True:
            await self.leader.wait_until_leader()
            for key in list(self.hub.cache):
                self.enqueue(key)
            await self.leader.wait_until_follower()

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            if not self.leader.is_leader:
                continue  # a new term enqueues everything again
            try:
                await self._reconcile(key)
            except (TimeoutError, ApiException, OSError, aiohttp.ClientError) as e:
                log.warning(
                    "connection %s/%s: status write failed: %s", *key, getattr(e, "status", None) or e
                )
                asyncio.get_running_loop().call_later(1.0, self.enqueue, key)
            except Exception:  # one bad object must not stop the reconciler
                log.exception("connection %s/%s: reconcile failed", *key)
                asyncio.get_running_loop().call_later(5.0, self.enqueue, key)

    async def _reconcile(self, key: Key) -> None:
        conn = self.hub.cache.get(key)
        if conn is None:
            return
        workload = str((conn.get("spec") or {}).get("workloadName") or "")
        workers = list(self.workers.get((key[0], workload), {}).values())
        load: dict[str, int] = {}
        for k, other in self.hub.cache.items():
            if k[0] == key[0] and k != key:
                w = (other.get("status") or {}).get("workerName")
                if w:
                    load[w] = load.get(w, 0) + 1
        want = desired_status(conn, workers, load)
        if not status_differs(conn, want):
            return
        try:
            await call_json(
                self.custom.patch_namespaced_custom_object_status,
                sources.GROUP,
                sources.VERSION,
                key[0],
                PLURAL,
                key[1],
                {"status": want},
                _content_type="application/merge-patch+json",
            )
        except ApiException as e:
            if e.status == 404:
                return
            raise
        # Count it at once for the next connection's choice; the informer brings the real object.
        status = {k: v for k, v in {**(conn.get("status") or {}), **want}.items() if v is not None}
        self.hub.cache[key] = {**conn, "status": status}
