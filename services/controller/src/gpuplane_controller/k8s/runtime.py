"""The controller's Kubernetes side: informers feeding ClusterState, the
scheduler loop for `tensor-fusion-scheduler` pods, and batched GPU status writes."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_controller.domain.podrequest import GPU_IDS, INDEX, SCHEDULER_NAME, gpu_ids, parse_request
from gpuplane_controller.k8s import sources
from gpuplane_controller.k8s.events import now, record_event
from gpuplane_controller.k8s.leader import AlwaysLeader, LeaderElector
from gpuplane_controller.state import ClusterState, fmt_tflops, fmt_vram
from gpuplane_core.errors import GpuplaneError
from gpuplane_core.k8s.raw import call_json
from gpuplane_core.k8s.watch import WatchEvent, WatchHealth, resumable_watch

log = logging.getLogger(__name__)

MAX_INDEX = 128
BIND_CONCURRENCY = 64
STATUS_CONCURRENCY = 16


def _uid(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["uid"])


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _ours_pending(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return (
        spec.get("schedulerName") == SCHEDULER_NAME
        and not spec.get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
        and not _terminal(pod)
    )


class Controller:
    def __init__(
        self,
        api: client.ApiClient,
        state: ClusterState | None = None,
        leader: LeaderElector | AlwaysLeader | None = None,
    ) -> None:
        self.api = api
        # Only the leader schedules, binds and writes status; followers keep their caches and
        # allocations (from pod annotations) current so a failover resumes at once.
        self.leader = leader or AlwaysLeader()
        self.pod_listeners: list[Callable[[WatchEvent], None]] = []  # other consumers of pod events
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.state = state or ClusterState()
        self.health: dict[str, WatchHealth] = {}
        self.synced: set[str] = set()
        self.pods_synced = asyncio.Event()
        self._inventory_synced = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: dict[str, dict[str, Any]] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._unschedulable: dict[str, float] = {}  # uid -> earliest retry (monotonic)
        self._failures: dict[str, int] = {}
        self._last_condition: dict[str, str] = {}
        self._binding: set[str] = set()
        self._bind_sem = asyncio.Semaphore(BIND_CONCURRENCY)
        self._bind_api: client.ApiClient | None = None
        self._binder = self.core  # replaced in start() by a client with its own connections
        self._indices: dict[str, dict[str, int]] = {}  # node -> {uid: index}
        self._capacity_changed = asyncio.Event()
        self._observed_available: dict[str, tuple[str, str]] = {}
        self._written_nodes: dict[str, tuple[Any, ...]] = {}

    # ---- lifecycle -----------------------------------------------------------------------------
    INFORMERS = ("nodes", "gpupools", "schedulingconfigtemplates", "gpuresourcequotas", "gpus")

    def not_ready_reason(self) -> str | None:
        missing = [n for n in (*self.INFORMERS, "pods") if n not in self.synced]
        if missing:
            return f"informer caches not synced: {', '.join(missing)}"
        # A broken watch (apiserver down or restarting) leaves the caches stale: not ready until resumed.
        broken = sorted(n for n, h in self.health.items() if not h.healthy)
        if broken:
            return f"watch broken: {broken[0]}: {self.health[broken[0]].error}"
        return None

    async def start(self) -> None:
        api = self.api
        # Binds get a connection pool of their own: over HTTP/1.1 every call in flight holds a
        # connection, and the shared pool (32) is mostly held by watches and status writes; lease
        # renewals must not queue behind a burst of binds either.
        cfg = copy.deepcopy(api.configuration)
        cfg.connection_pool_maxsize = BIND_CONCURRENCY
        self._bind_api = client.ApiClient(configuration=cfg)
        self._binder = client.CoreV1Api(self._bind_api)
        fns: dict[str, tuple[sources.ListFn, Callable[[WatchEvent], None]]] = {
            "nodes": (sources.nodes(api), self._on_node),
            "gpupools": (sources.cluster_custom(api, "gpupools"), self._on_pool),
            "schedulingconfigtemplates": (
                sources.cluster_custom(api, "schedulingconfigtemplates"),
                self._on_template,
            ),
            "gpuresourcequotas": (sources.all_namespaces_custom(api, "gpuresourcequotas"), self._on_quota),
            "gpus": (sources.cluster_custom(api, "gpus"), self._on_gpu),
        }
        for name, (fn, handler) in fns.items():
            self._spawn(self._informer(name, fn, handler))
        self._spawn(self._start_pods())
        self._spawn(self._status_writer())
        self._spawn(self._retry_loop())

    def _spawn(self, coro: Awaitable[None]) -> None:
        self._tasks.append(asyncio.ensure_future(coro))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._bind_api is not None:
            await self._bind_api.close()

    async def _informer(self, name: str, fn: sources.ListFn, handler: Callable[[WatchEvent], None]) -> None:
        health = self.health.setdefault(name, WatchHealth())
        async for ev in resumable_watch(fn, health=health):
            try:
                handler(ev)
            except Exception:  # one bad object must not stop the informer
                log.exception("informer %s failed to handle an event", name)
            if ev.type == "RELISTED":
                self.synced.add(name)
                self._capacity_changed.set()
                if all(n in self.synced for n in self.INFORMERS):
                    self._inventory_synced.set()
                if name == "pods":
                    self.pods_synced.set()

    async def _start_pods(self) -> None:
        # Allocations are rebuilt from pod annotations only once GPUs and pools are known.
        await self._inventory_synced.wait()
        self._spawn(self._informer("pods", sources.pods(self.api), self._on_pod))
        await self.pods_synced.wait()
        self._spawn(self._schedule_loop())

    # ---- informer handlers ----------------------------------------------------------------------
    def _on_node(self, ev: WatchEvent) -> None:
        st = self.state
        if ev.type == "RELISTED":
            names = {o["metadata"]["name"] for o in ev.items}
            for gone in set(st.nodes) - names:
                st.remove_node(gone)
            for o in ev.items:
                st.upsert_node(o)
        elif ev.type == "DELETED":
            st.remove_node(ev.object["metadata"]["name"])
            self._capacity_changed.set()
        elif st.upsert_node(ev.object):
            self._capacity_changed.set()

    def _on_pool(self, ev: WatchEvent) -> None:
        self._simple(ev, self.state.upsert_pool, self.state.remove_pool, self.state.pools)

    def _on_template(self, ev: WatchEvent) -> None:
        self._simple(ev, self.state.upsert_template, self.state.remove_template, self.state.templates)

    def _on_quota(self, ev: WatchEvent) -> None:
        alloc = self.state.allocator
        if ev.type == "RELISTED":
            alloc.quotas.clear()
            for o in ev.items:
                self.state.upsert_quota(o)
        elif ev.type == "DELETED":
            alloc.remove_quota(ev.object["metadata"]["namespace"])
        else:
            self.state.upsert_quota(ev.object)
        self._capacity_changed.set()

    def _simple(
        self,
        ev: WatchEvent,
        upsert: Callable[[dict[str, Any]], None],
        remove: Callable[[str], None],
        cache: dict[str, Any],
    ) -> None:
        if ev.type == "RELISTED":
            names = {o["metadata"]["name"] for o in ev.items}
            for gone in set(cache) - names:
                remove(gone)
            for o in ev.items:
                upsert(o)
        elif ev.type == "DELETED":
            remove(ev.object["metadata"]["name"])
        else:
            upsert(ev.object)
        self._capacity_changed.set()

    def _on_gpu(self, ev: WatchEvent) -> None:
        st = self.state
        objs = ev.items if ev.type == "RELISTED" else [ev.object]
        if ev.type == "RELISTED":
            names = {o["metadata"]["name"] for o in objs}
            for gone in set(st.gpu_objects) - names:
                st.remove_gpu_object(gone)
        for o in objs:
            name = o["metadata"]["name"]
            if ev.type == "DELETED":
                st.remove_gpu_object(name)
                self._observed_available.pop(name, None)
                continue
            av = (o.get("status") or {}).get("available") or {}
            self._observed_available[name] = (str(av.get("tflops", "")), str(av.get("vram", "")))
            old = st.gpu_objects.get(name)
            if (
                old is not None
                and old.get("status", {}).get("capacity") == o.get("status", {}).get("capacity")
                and (
                    {k: v for k, v in (old.get("status") or {}).items() if k != "available"}
                    == {k: v for k, v in (o.get("status") or {}).items() if k != "available"}
                    and old["metadata"].get("labels") == o["metadata"].get("labels")
                )
            ):
                st.gpu_objects[name] = o  # only our own availability write: nothing to recompute
                continue
            st.upsert_gpu_object(o)
        self._capacity_changed.set()

    def _on_pod(self, ev: WatchEvent) -> None:
        if ev.type == "RELISTED":
            present = {_uid(p) for p in ev.items}
            for uid in list(self.state.allocator.allocations):
                if uid not in present:
                    self._release(uid)
            for uid in list(self._pending):
                if uid not in present:
                    self._forget(uid)
            for p in ev.items:
                self._pod_changed(p)
        elif ev.type == "DELETED":
            uid = _uid(ev.object)
            self._release(uid)
            self._forget(uid)
        else:
            self._pod_changed(ev.object)
        for listener in self.pod_listeners:
            listener(ev)

    def _pod_changed(self, pod: dict[str, Any]) -> None:
        uid = _uid(pod)
        alloc = self.state.allocator
        if _terminal(pod):
            self._release(uid)
            self._forget(uid)
            return
        ids = gpu_ids(pod)
        if ids and uid not in alloc.allocations:
            self._rebuild(pod, ids)
        if _ours_pending(pod):
            self._pending[uid] = pod
            if uid not in self._unschedulable:
                self._enqueue(uid)
        else:
            self._forget(uid)

    def _rebuild(self, pod: dict[str, Any], ids: list[str]) -> None:
        """Re-reserve what the pod's annotations say it holds (restart, or another replica bound it)."""
        st = self.state
        try:
            req = parse_request(pod, st.default_pool)
        except GpuplaneError as e:
            log.warning("pod %s/%s holds gpus but its request is invalid: %s", *_nsname(pod), e)
            return
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if not node:
            g = st.allocator.gpus.get(ids[0])
            node = g.node if g else ""
        req.gpu_count = len(ids)
        try:
            st.allocator.reserve(req, node, ids)
        except GpuplaneError as e:
            log.warning("pod %s/%s: cannot rebuild allocation: %s", *_nsname(pod), e.message)
            return
        raw_index = ((pod["metadata"].get("annotations") or {}).get(INDEX) or "").strip()
        if raw_index.isdigit():
            self._indices.setdefault(node, {})[pod["metadata"]["uid"]] = int(raw_index)

    def _release(self, uid: str) -> None:
        alloc = self.state.allocator.release(uid)
        if alloc is not None:
            self._indices.get(alloc.node, {}).pop(uid, None)
            self._capacity_changed.set()

    def _forget(self, uid: str) -> None:
        self._pending.pop(uid, None)
        self._unschedulable.pop(uid, None)
        self._failures.pop(uid, None)
        self._last_condition.pop(uid, None)

    def _enqueue(self, uid: str) -> None:
        if uid not in self._queued and uid not in self._binding:
            self._queued.add(uid)
            self._queue.put_nowait(uid)

    # ---- scheduling -----------------------------------------------------------------------------
    async def _schedule_loop(self) -> None:
        while True:
            await self.leader.wait_until_leader()
            uid = await self._queue.get()
            self._queued.discard(uid)
            if not self.leader.is_leader:  # lost it while waiting: a later term schedules it
                self._enqueue(uid)
                continue
            pod = self._pending.get(uid)
            if pod is None or uid in self._binding:
                continue
            self._schedule_one(pod)
            if self._queue.empty():
                await asyncio.sleep(0)  # let watch events and bindings progress

    def _schedule_one(self, pod: dict[str, Any]) -> None:
        st, uid = self.state, _uid(pod)
        existing = st.allocator.allocations.get(uid)
        if existing is not None:  # reserved from its annotations but not bound: bind it there
            self._start_bind(pod, existing.node, list(existing.gpus))
            return
        try:
            req = parse_request(pod, st.default_pool)
        except GpuplaneError as e:
            self._unschedulable[uid] = float("inf")  # retried when the pod itself changes
            self._spawn(self._report_failure(pod, f"invalid GPU request: {e.message}", "InvalidRequest"))
            return
        node_ok = st.node_ok_for(pod.get("spec") or {})
        decision = st.allocator.schedule(req, node_ok)
        if not decision.ok:
            decision = st.allocator.schedule(req, node_ok, diagnose=True)
            n = self._failures[uid] = self._failures.get(uid, 0) + 1
            # 1s doubling to 10s, kube-scheduler's podInitialBackoffSeconds/podMaxBackoffSeconds: a pod
            # that failed during a burst (nodes flapping NotReady) is not left waiting 30s after it.
            self._unschedulable[uid] = time.monotonic() + min(10.0, 0.5 * 2 ** min(n, 6))
            self._spawn(self._report_failure(pod, decision.error, "Unschedulable"))
            return
        st.allocator.reserve(req, decision.node, decision.gpus)
        self._start_bind(pod, decision.node, decision.gpus)

    def _start_bind(self, pod: dict[str, Any], node: str, gpus: list[str]) -> None:
        uid = _uid(pod)
        self._binding.add(uid)
        self._pending.pop(uid, None)
        self._unschedulable.pop(uid, None)
        self._spawn(self._bind(pod, node, gpus))

    def _next_index(self, node: str, uid: str) -> int:
        used = self._indices.setdefault(node, {})
        if uid in used:
            return used[uid]
        taken = set(used.values())
        idx = next((i for i in range(1, MAX_INDEX + 1) if i not in taken), 1 + len(used) % MAX_INDEX)
        used[uid] = idx
        return idx

    async def _bind(self, pod: dict[str, Any], node: str, gpus: list[str]) -> None:
        uid = _uid(pod)
        ns, name = _nsname(pod)
        async with self._bind_sem:
            try:
                # The apiserver copies a Binding's annotations onto the pod in the same write, so
                # gpu-ids/index and nodeName land atomically (one API call per pod).
                index = self._next_index(node, uid)
                annotations = {GPU_IDS: ",".join(gpus), INDEX: str(index)}
                binding = {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name, "namespace": ns, "uid": uid, "annotations": annotations},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                }
                await call_json(self._binder.create_namespaced_binding, ns, binding)
                self._forget(uid)
            except ApiException as e:
                if e.status == 404:
                    self._release(uid)
                    self._forget(uid)
                elif e.status == 409 and "already assigned" in (e.body or ""):
                    pass  # bound already (another attempt won); the allocation stands
                elif e.status >= 500:
                    await self._settle_unknown_bind(pod, node, f"{e.status} {e.reason}")
                else:
                    log.warning("binding %s/%s to %s failed: %s %s", ns, name, node, e.status, e.reason)
                    self._retry_later(pod)
            except Exception as e:  # transport error: the Binding may or may not have been stored
                await self._settle_unknown_bind(pod, node, repr(e))
            finally:
                self._binding.discard(uid)

    def _retry_later(self, pod: dict[str, Any]) -> None:
        uid = _uid(pod)
        self._release(uid)
        self._unschedulable[uid] = time.monotonic() + 1.0
        self._pending.setdefault(uid, pod)

    async def _settle_unknown_bind(self, pod: dict[str, Any], node: str, why: str) -> None:
        """A bind whose outcome is unknown (5xx, dropped connection) may have been stored.
        Releasing its GPUs before knowing could hand them to a second pod while this one runs
        there, so the pod is read back first; only a pod still unbound is retried."""
        uid = _uid(pod)
        ns, name = _nsname(pod)
        for delay in (0.2, 0.5, 1.0, 2.0, 4.0, 8.0):
            try:
                live = await call_json(self.core.read_namespaced_pod, name, ns)
            except ApiException as e:
                if e.status == 404:
                    self._release(uid)
                    self._forget(uid)
                    return
                await asyncio.sleep(delay)
                continue
            except Exception:
                await asyncio.sleep(delay)
                continue
            if live["metadata"].get("uid") != uid:  # deleted and re-created under the same name
                self._release(uid)
                self._forget(uid)
                return
            if (live.get("spec") or {}).get("nodeName"):
                self._forget(uid)  # stored after all; the pod informer checks it against the annotations
                return
            break
        log.warning("binding %s/%s to %s failed: %s", ns, name, node, why)
        self._retry_later(pod)

    async def _report_failure(self, pod: dict[str, Any], message: str, reason: str) -> None:
        uid = _uid(pod)
        ns, name = _nsname(pod)
        if self._last_condition.get(uid) == message:
            return
        self._last_condition[uid] = message
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now(),
        }
        try:
            await call_json(
                self.core.patch_namespaced_pod_status, name, ns, {"status": {"conditions": [condition]}}
            )
            await record_event(
                self.core,
                {"kind": "Pod", "apiVersion": "v1", "name": name, "namespace": ns, "uid": uid},
                "FailedScheduling",
                message,
                component=SCHEDULER_NAME,
            )
        except ApiException as e:
            if e.status != 404:
                log.warning("could not report scheduling failure of %s/%s: %s", ns, name, e.status)

    async def _retry_loop(self) -> None:
        """Unschedulable pods are retried when capacity changes, no sooner than their backoff."""
        while True:
            await self._capacity_changed.wait()
            self._capacity_changed.clear()
            await asyncio.sleep(0.1)  # coalesce bursts of changes
            now = time.monotonic()
            for uid, when in list(self._unschedulable.items()):
                if when <= now:
                    self._unschedulable.pop(uid, None)
                    self._enqueue(uid)
            if any(w != float("inf") for w in self._unschedulable.values()):
                soonest = min(w for w in self._unschedulable.values() if w != float("inf"))
                self._spawn(self._wake_at(soonest))

    async def _wake_at(self, when: float) -> None:
        await asyncio.sleep(max(0.0, when - time.monotonic()))
        self._capacity_changed.set()

    def capacity_changed(self) -> None:
        """Something outside the informers (the dynamic config) changed what fits: retry pods."""
        self._capacity_changed.set()

    def pod_changed_spec(self, uid: str) -> None:
        self._unschedulable.pop(uid, None)

    def pending_pods(self) -> list[dict[str, Any]]:
        """Our pods waiting for a node, as last seen (the node scaler reads their PodScheduled)."""
        return list(self._pending.values())

    # ---- status writes ----------------------------------------------------------------------------
    async def _status_writer(self, interval: float = 0.5) -> None:
        """Write GPU `status.available` and GPUNode totals for GPUs whose allocations changed, batched."""
        sem = asyncio.Semaphore(STATUS_CONCURRENCY)
        while True:
            await asyncio.sleep(interval)
            if not self.leader.is_leader:
                continue  # changes stay dirty: a new leader writes them
            alloc = self.state.allocator
            dirty, alloc.dirty_gpus = alloc.dirty_gpus, set()
            writes: list[Awaitable[None]] = []
            nodes: set[str] = set()
            for name in dirty:
                g = alloc.gpus.get(name)
                if g is None or name not in self.state.gpu_objects:
                    continue
                nodes.add(g.node)
                want = (fmt_tflops(g.available_tflops_m), fmt_vram(g.available_vram))
                if self._observed_available.get(name) != want:
                    writes.append(self._patch_gpu(sem, name, want))
            for node in nodes:
                writes.append(self._patch_node(sem, node))
            if writes:
                await asyncio.gather(*writes, return_exceptions=True)

    async def _patch_gpu(self, sem: asyncio.Semaphore, name: str, want: tuple[str, str]) -> None:
        body = {"status": {"available": {"tflops": want[0], "vram": want[1]}}}
        async with sem:
            try:
                await self.custom.patch_cluster_custom_object_status(
                    sources.GROUP,
                    sources.VERSION,
                    "gpus",
                    name,
                    body,
                    _content_type="application/merge-patch+json",
                )
                self._observed_available[name] = want
            except ApiException as e:
                if e.status != 404:
                    log.warning("GPU %s status write failed: %s", name, e.status)
                    self.state.allocator.dirty_gpus.add(name)

    async def _patch_node(self, sem: asyncio.Semaphore, node: str) -> None:
        alloc = self.state.allocator
        gpus = alloc.node_gpus(node)
        pods: dict[str, list[dict[str, str]]] = {}
        for g in gpus:
            pods[g.name] = [
                {
                    "name": a.req.pod.name,
                    "namespace": a.req.pod.namespace,
                    "uid": a.req.pod.uid,
                    "qos": a.req.qos,
                }
                for a in alloc.gpu_workers(g.name)
            ]
        status = {
            "availableTFlops": fmt_tflops(sum(g.available_tflops_m for g in gpus)),
            "availableVRAM": fmt_vram(sum(g.available_vram for g in gpus)),
            "virtualTFlops": fmt_tflops(sum(g.virtual_tflops_m for g in gpus)),
            "allocatedPods": pods,
        }
        key = tuple(sorted((k, str(v)) for k, v in status.items()))
        if self._written_nodes.get(node) == key:
            return
        async with sem:
            try:
                await self.custom.patch_cluster_custom_object_status(
                    sources.GROUP,
                    sources.VERSION,
                    "gpunodes",
                    node,
                    {"status": status},
                    _content_type="application/merge-patch+json",
                )
                self._written_nodes[node] = key
            except ApiException as e:
                if e.status != 404:
                    log.warning("GPUNode %s status write failed: %s", node, e.status)


def _nsname(pod: dict[str, Any]) -> tuple[str, str]:
    return pod["metadata"].get("namespace") or "default", pod["metadata"]["name"]
