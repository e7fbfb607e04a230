"""Host ports and device indices handed out by the leader (`/api/assign-host-port`,
`/api/assign-index`), made durable so that a new leader never hands out a port twice.

Durability: every new assignment is recorded in a ledger ConfigMap (`data`:
`port.<podName>` / `index.<podName>` -> `"<value> <unix time assigned>"`) before it is
answered. Writes are group-committed: concurrent requests share one JSON merge patch, which
adds keys without read-modify-write conflicts. A new leader rebuilds both allocators from the
ledger plus the `tensor-fusion.ai/port-number` annotation of live pods (ports assigned by a
TensorFusion-compatible webhook that the ledger may not know).

Release: when the last live pod with that name is deleted or finishes; assignments for a pod
name that never shows up (a webhook that asked and then failed) are released after
`grace` seconds. Only the leader writes the ledger."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_controller.domain.connections import PORT_ANNOTATION
from gpuplane_controller.domain.hostports import HostPortAllocator
from gpuplane_controller.domain.indices import IndexAllocator
from gpuplane_controller.k8s.leader import AlwaysLeader, LeaderElector
from gpuplane_core.backoff import Backoff
from gpuplane_core.errors import NotReady, UpstreamError
from gpuplane_core.k8s.raw import call_json
from gpuplane_core.k8s.watch import WatchEvent

log = logging.getLogger(__name__)

PORT, INDEX = "port", "index"
NOT_LEADER = "current instance is not the leader"
LOAD_WAIT_S = 10.0


def _gone(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class Assignments:
    def __init__(
        self,
        api: client.ApiClient,
        leader: LeaderElector | AlwaysLeader,
        *,
        namespace: str,
        ledger: str,
        port_range: tuple[int, int],
        grace: float,
        pods_synced: asyncio.Event,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.leader = leader
        self.namespace, self.ledger = namespace, ledger
        self.port_range, self.grace = port_range, grace
        self.pods_synced = pods_synced
        self._loaded = asyncio.Event()  # the ledger is loaded for the current leadership term
        self._wake = asyncio.Event()
        self._reset()
        self.live: dict[str, set[str]] = {}  # pod name -> uids of its live pods (any namespace)
        self.annotated: dict[str, tuple[str, int]] = {}  # uid -> (pod name, port-number annotation)
        self._tasks: list[asyncio.Task[None]] = []

    def _reset(self) -> None:
        self.ports = HostPortAllocator(*self.port_range)
        self.indices = IndexAllocator()
        self.assigned_at: dict[tuple[str, str], float] = {}
        self._durable: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._patch: dict[str, str | None] = {}
        self._batch: asyncio.Future[None] | None = None
        self._wake.clear()

    # ---- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._terms()), asyncio.ensure_future(self._gc_loop())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _terms(self) -> None:
        """Per leadership term: load the ledger, serve, then drop everything when the term ends."""
        while True:
            await self.leader.wait_until_leader()
            self._reset()
            flusher = asyncio.ensure_future(self._flusher())
            try:
                await self._load()
                self._loaded.set()
                log.info(
                    "assignments loaded",
                    extra={"ports": len(self.ports.by_pod), "indices": len(self.indices.by_pod)},
                )
                await self.leader.wait_until_follower()
            finally:
                flusher.cancel()
                await asyncio.gather(flusher, return_exceptions=True)
                if self._batch is not None and not self._batch.done():
                    self._batch.set_exception(NotReady(NOT_LEADER, code="not_leader"))
                    self._batch.exception()
                self._loaded.clear()

    async def _load(self) -> None:
        delays = Backoff().delays()
        while True:
            try:
                cm = await call_json(self.core.read_namespaced_config_map, self.ledger, self.namespace)
                data = cm.get("data") or {}
                break
            except ApiException as e:
                if e.status == 404:
                    data = {}
                    break
                log.warning("reading ledger %s/%s failed: %s", self.namespace, self.ledger, e.status)
            except (TimeoutError, OSError, aiohttp.ClientError) as e:
                log.warning("reading ledger %s/%s failed: %s", self.namespace, self.ledger, e)
            await asyncio.sleep(next(delays))
        for key, raw in sorted(data.items(), key=lambda kv: _when(kv[1])):
            kind, _, pod = key.partition(".")
            value = raw.split()[0] if raw.split() else ""
            if not value.isdigit() or not pod:
                continue
            ok = (
                self.ports.restore(pod, int(value))
                if kind == PORT
                else self.indices.restore(pod, int(value))
                if kind == INDEX
                else False
            )
            if ok:
                self.assigned_at[(kind, pod)] = _when(raw)
            else:
                log.warning("ledger entry %s=%s conflicts or is out of range; dropped", key, raw)
        for uid, (pod, port) in sorted(self.annotated.items()):
            if uid in self.live.get(pod, set()) and self.ports.by_pod.get(pod) != port and port in self.ports:
                if not self.ports.restore(pod, port):
                    log.warning("pod %s annotates port %d held by another pod", pod, port)

    # ---- requests (leader only) ----------------------------------------------------------------------
    async def assign(self, kind: str, pod: str) -> int:
        if not self.leader.is_leader:
            raise NotReady(NOT_LEADER, code="not_leader")
        try:
            await asyncio.wait_for(self._loaded.wait(), LOAD_WAIT_S)
        except TimeoutError:
            raise NotReady("assignment ledger not loaded yet; retry", code="not_loaded") from None
        key = (kind, pod)
        pending = self._durable.get(key)
        if pending is not None:  # assigned a moment ago, not yet recorded: answer once recorded
            await asyncio.shield(pending)
        alloc = self.ports if kind == PORT else self.indices
        if pod in alloc.by_pod:
            self._still_leading()
            return alloc.by_pod[pod]
        value = alloc.assign(pod)
        now = time.time()
        self.assigned_at[key] = now
        fut = self._durable[key] = self._record(f"{kind}.{pod}", f"{value} {int(now)}")
        try:
            await asyncio.shield(fut)
        except BaseException:
            failed = fut.done() and not fut.cancelled() and fut.exception() is not None
            if failed and alloc.by_pod.get(pod) == value:
                alloc.release(pod)  # never answered, never recorded: free it again
                self.assigned_at.pop(key, None)
            raise
        finally:
            if self._durable.get(key) is fut:
                del self._durable[key]
        self._still_leading()
        return value

    def _still_leading(self) -> None:
        # Lost the lease meanwhile (e.g. frozen past the renew deadline): a new leader may not
        # have seen this entry, so the number must not be handed out.
        if not self.leader.is_leader:
            raise NotReady(NOT_LEADER, code="not_leader")

    def _record(self, key: str, value: str | None) -> asyncio.Future[None]:
        self._patch[key] = value
        if self._batch is None:
            self._batch = asyncio.get_running_loop().create_future()
        self._wake.set()
        return self._batch

    async def _flusher(self) -> None:
        """One merge patch per batch; requests that arrive meanwhile form the next batch."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            patch, fut = self._patch, self._batch
            self._patch, self._batch = {}, None
            if not patch or fut is None:
                continue
            try:
                await self._write(patch)
            except asyncio.CancelledError:  # the term ended mid-write: nobody may wait forever
                fut.set_exception(NotReady(NOT_LEADER, code="not_leader"))
                fut.exception()
                raise
            except (TimeoutError, ApiException, OSError, aiohttp.ClientError) as e:
                log.warning("ledger write failed: %s", getattr(e, "status", None) or e)
                fut.set_exception(UpstreamError("could not record the assignment in Kubernetes; retry"))
                fut.exception()
            except Exception:  # the flusher must survive anything, or every request would hang
                log.exception("ledger write failed")
                fut.set_exception(UpstreamError("could not record the assignment in Kubernetes; retry"))
                fut.exception()
            else:
                fut.set_result(None)

    async def _write(self, patch: dict[str, str | None]) -> None:
        try:
            await call_json(
                self.core.patch_namespaced_config_map,
                self.ledger,
                self.namespace,
                {"data": patch},
                _content_type="application/merge-patch+json",
            )
        except ApiException as e:
            if e.status != 404:
                raise
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": self.ledger,
                    "namespace": self.namespace,
                    "labels": {"app.kubernetes.io/part-of": "gpuplane"},
                },
                "data": {k: v for k, v in patch.items() if v is not None},
            }
            try:
                await call_json(self.core.create_namespaced_config_map, self.namespace, body)
            except ApiException as e2:
                if e2.status != 409:
                    raise
                await self._write(patch)  # created concurrently: patch it

    # ---- release -------------------------------------------------------------------------------------
    def _release(self, pod: str) -> None:
        if not self._loaded.is_set():
            return  # followers hold nothing; a new leader's GC catches up
        for kind, alloc in ((PORT, self.ports), (INDEX, self.indices)):
            if (kind, pod) in self._durable:
                continue  # being recorded right now: its pod may simply not exist yet
            if alloc.release(pod) is not None:
                self.assigned_at.pop((kind, pod), None)
                self._record(f"{kind}.{pod}", None)

    def on_pod_event(self, ev: WatchEvent) -> None:
        """Fed by the controller's pod informer (every replica)."""
        if ev.type == "RELISTED":
            old = set(self.live)
            self.live, self.annotated = {}, {}
            for p in ev.items:
                self._seen(p)
            for pod in old - set(self.live):
                self._release(pod)
            return
        pod = ev.object
        meta = pod["metadata"]
        name, uid = meta["name"], meta["uid"]
        if ev.type == "DELETED" or _gone(pod):
            self.annotated.pop(uid, None)
            uids = self.live.get(name)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self.live[name]
                    self._release(name)
        else:
            self._seen(pod)

    def _seen(self, pod: dict[str, Any]) -> None:
        if _gone(pod):
            return
        meta = pod["metadata"]
        self.live.setdefault(meta["name"], set()).add(meta["uid"])
        raw = str((meta.get("annotations") or {}).get(PORT_ANNOTATION) or "")
        if raw.isdigit():
            self.annotated[meta["uid"]] = (meta["name"], int(raw))

    async def _gc_loop(self) -> None:
        """Release assignments whose pod never appeared (or vanished while no leader watched)."""
        period = max(1.0, min(30.0, self.grace / 4))
        while True:
            await asyncio.sleep(period)
            if not self._loaded.is_set() or not self.pods_synced.is_set():
                continue
            cutoff = time.time() - self.grace
            for _kind, pod in [k for k, at in self.assigned_at.items() if at < cutoff]:
                if pod not in self.live:
                    self._release(pod)


def _when(raw: str) -> float:
    parts = raw.split()
    try:
        return float(parts[1]) if len(parts) > 1 else 0.0
    except ValueError:
        return 0.0
