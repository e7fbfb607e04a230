"""Hypervisor heartbeat evidence shared between controller replicas, and the loss sweep.

A hypervisor's Heartbeat may land on any replica behind the Service, so the replica that
receives it renews a per-node `coordination.k8s.io/v1` Lease (`tf-hypervisor-<node>` in
`heartbeat_lease_namespace`, owned by the GPUNode), at most every timeout/4 per node, like
kubelet node leases. Every replica watches those Leases; only the leader sweeps: a node whose
lease was not renewed for `heartbeat_timeout_seconds` gets GPUNode `phase` and
`hypervisorStatus.hypervisorState` Unknown and its Running GPUs phase Unknown (message
`hypervisor heartbeat lost`), which the scheduler's PhaseFilter excludes. When the lease is
renewed again, the receiving replica (at once) or the leader (next sweep) puts them back to
Running; GPUs that were Unknown because the device itself is unhealthy are left alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_controller.domain.heartbeat import LeaseTracker
from gpuplane_controller.k8s.events import micro_now, now
from gpuplane_controller.k8s.sources import GROUP, VERSION
from gpuplane_controller.settings import Settings
from gpuplane_controller.state import ClusterState
from gpuplane_core.k8s.raw import list_json
from gpuplane_core.k8s.watch import WatchEvent, WatchHealth, resumable_watch

log = logging.getLogger(__name__)

LEASE_PREFIX = "tf-hypervisor-"
LEASE_LABEL = "tensor-fusion.ai/hypervisor-lease"
LOST_MESSAGE = "hypervisor heartbeat lost"
MERGE = "application/merge-patch+json"
STATUS_REPORT_SECONDS = 60.0  # GPUNode lastHeartbeatTime is refreshed this often, not per heartbeat


def lease_name(node: str) -> str:
    return (LEASE_PREFIX + node)[:253]


class Heartbeats:
    def __init__(
        self, api: client.ApiClient, state: ClusterState, settings: Settings, is_leader: Callable[[], bool]
    ) -> None:
        self.api = api
        self.coord = client.CoordinationV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.state = state
        self.settings = settings
        self.is_leader = is_leader
        self.namespace = settings.heartbeat_lease_namespace
        self.timeout = settings.heartbeat_timeout_seconds
        self.tracker = LeaseTracker()
        self.gpunodes: dict[str, dict[str, Any]] = {}  # name -> {"uid", "state", "phase"}
        self.lease_health = WatchHealth()
        self.gpunode_health = WatchHealth()
        self._renewed: dict[str, float] = {}  # node -> monotonic time of this replica's last renew
        self._reported: dict[str, float] = {}  # node -> monotonic time of the last lastHeartbeatTime write
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [
            asyncio.ensure_future(self._watch_leases()),
            asyncio.ensure_future(self._watch_gpunodes()),
            asyncio.ensure_future(self._sweep_loop()),
        ]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---- the receiving replica ---------------------------------------------------------------------
    async def beat(
        self, node: str, version: str, registered: bool = False, healthy: dict[str, bool] | None = None
    ) -> None:
        """One heartbeat (or registration) from `node`'s hypervisor arrived here; `healthy` is the
        device health it reported, by GPU object name (an unhealthy device is not put back)."""
        try:
            await self._beat(node, version, registered, healthy)
        except (ApiException, OSError, aiohttp.ClientError, TimeoutError) as e:
            # Best effort: the heartbeat itself arrived; if the evidence cannot be recorded the
            # leader's sweep treats the node as silent, which is what the cluster can tell.
            log.warning("recording the heartbeat of %s failed: %s", node, getattr(e, "status", None) or e)

    async def _beat(self, node: str, version: str, registered: bool, healthy: dict[str, bool] | None) -> None:
        now = time.monotonic()
        if registered or now - self._renewed.get(node, -1e9) >= self.timeout / 4:
            await self._renew(node)
            self._renewed[node] = now
        if self._looks_lost(node):
            await self._mark(node, lost=False, healthy=healthy)
            self._reported[node] = now
        elif not registered and now - self._reported.get(node, -1e9) >= STATUS_REPORT_SECONDS:
            await self._status(
                "gpunodes",
                node,
                {
                    "hypervisorStatus": {
                        "hypervisorState": "Running",
                        "hypervisorVersion": version,
                        "lastHeartbeatTime": now(),
                    }
                },
            )
            self._reported[node] = now
        if registered:
            self._reported[node] = now  # registration wrote the GPUNode status already

    async def _renew(self, node: str) -> None:
        name = lease_name(node)
        spec = {
            "holderIdentity": node,
            "leaseDurationSeconds": max(1, int(self.timeout)),
            "renewTime": micro_now(),
        }
        try:
            await self.coord.patch_namespaced_lease(name, self.namespace, {"spec": spec}, _content_type=MERGE)
            return
        except ApiException as e:
            if e.status != 404:
                log.warning("renewing hypervisor lease %s/%s failed: %s", self.namespace, name, e.status)
                return
        meta: dict[str, Any] = {"name": name, "namespace": self.namespace, "labels": {LEASE_LABEL: "true"}}
        uid = (self.gpunodes.get(node) or {}).get("uid") or await self._gpunode_uid(node)
        if uid:  # garbage-collected with its GPUNode
            meta["ownerReferences"] = [
                {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUNode", "name": node, "uid": uid}
            ]
        try:
            await self.coord.create_namespaced_lease(
                self.namespace,
                {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec},
            )
        except ApiException as e:
            if e.status != 409:  # 409: another replica created it meanwhile; its renewTime is as good
                log.warning("creating hypervisor lease %s/%s failed: %s", self.namespace, name, e.status)

    async def _gpunode_uid(self, node: str) -> str | None:
        try:
            obj = await self.custom.get_cluster_custom_object(GROUP, VERSION, "gpunodes", node)
        except ApiException:
            return None
        return str(obj["metadata"]["uid"])

    # ---- state --------------------------------------------------------------------------------------
    def _gpus(self, node: str) -> list[tuple[str, dict[str, Any]]]:
        objs = self.state.gpu_objects
        return [
            (n, objs[n].get("status") or {})
            for n in sorted(self.state.gpu_objects_by_node.get(node, ()))
            if n in objs
        ]

    def _looks_lost(self, node: str) -> bool:
        gn = self.gpunodes.get(node) or {}
        if gn.get("state") == "Unknown":
            return True
        return any(
            s.get("phase") == "Unknown" and s.get("message") == LOST_MESSAGE for _, s in self._gpus(node)
        )

    def _looks_alive(self, node: str) -> bool:
        gn = self.gpunodes.get(node)
        if gn is not None and gn.get("state") != "Unknown":
            return True
        return any(s.get("phase") == "Running" for _, s in self._gpus(node))

    async def _mark(self, node: str, lost: bool, healthy: dict[str, bool] | None = None) -> None:
        if lost:
            log.warning(
                "hypervisor on %s missed heartbeats for %.0fs: marking it and its GPUs Unknown",
                node,
                self.timeout,
            )
            await self._status(
                "gpunodes", node, {"phase": "Unknown", "hypervisorStatus": {"hypervisorState": "Unknown"}}
            )
            for name, s in self._gpus(node):
                if s.get("phase") == "Running":
                    await self._status("gpus", name, {"phase": "Unknown", "message": LOST_MESSAGE})
        else:
            log.info("hypervisor on %s heartbeats again: back to Running", node)
            await self._status(
                "gpunodes",
                node,
                {
                    "phase": "Running",
                    "hypervisorStatus": {"hypervisorState": "Running", "lastHeartbeatTime": now()},
                },
            )
            for name, s in self._gpus(node):
                if (
                    s.get("phase") == "Unknown"
                    and s.get("message") == LOST_MESSAGE
                    and (healthy or {}).get(name, True)
                ):
                    await self._status("gpus", name, {"phase": "Running", "message": "device healthy"})

    async def _status(self, plural: str, name: str, status: dict[str, Any]) -> None:
        try:
            await self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, plural, name, {"status": status}, _content_type=MERGE
            )
        except ApiException as e:
            if e.status != 404:
                log.warning("%s %s status write failed: %s", plural, name, e.status)

    # ---- the leader's sweep -------------------------------------------------------------------------
    async def _sweep_loop(self) -> None:
        period = min(5.0, max(0.2, self.timeout / 6))
        was_leader = False
        while True:
            await asyncio.sleep(period)
            if not self.is_leader():
                was_leader = False
                continue
            now = time.monotonic()
            if not was_leader:
                self.tracker.restart_clock(now)
                was_leader = True
            try:
                await self.sweep(now)
            except Exception:  # the sweep must keep running; one failed write is retried next period
                log.exception("heartbeat sweep failed")

    async def sweep(self, now: float) -> None:
        for node in self.tracker.nodes():
            if node not in self.gpunodes:
                continue  # no GPUNode (yet, or deleted): nothing to mark
            # Renewals are throttled to one per timeout/4, so the last heartbeat may postdate the
            # last renewal by that much: judging at timeout + timeout/4 after it keeps "Unknown only
            # after `heartbeat_timeout_seconds` without a heartbeat" true.
            if self.tracker.is_stale(node, now, self.timeout * 1.25):
                if self._looks_alive(node):
                    await self._mark(node, lost=True)
            elif self._looks_lost(node):
                await self._mark(node, lost=False)

    # ---- informers ----------------------------------------------------------------------------------
    async def _watch_leases(self) -> None:
        coord, ns = self.coord, self.namespace

        async def list_leases(**kw: Any) -> Any:
            return await list_json(coord.list_namespaced_lease)(ns, **kw)

        async for ev in resumable_watch(
            list_leases, health=self.lease_health, label_selector=f"{LEASE_LABEL}=true"
        ):
            self._on_lease(ev, time.monotonic())

    def _on_lease(self, ev: WatchEvent, now: float) -> None:
        objs = ev.items if ev.type == "RELISTED" else [ev.object]
        if ev.type == "RELISTED":
            names = {self._lease_node(o) for o in objs}
            for gone in set(self.tracker.nodes()) - names:
                self.tracker.forget(gone)
        for o in objs:
            node = self._lease_node(o)
            if not node:
                continue
            if ev.type == "DELETED":
                self.tracker.forget(node)
            else:
                self.tracker.observe(node, str((o.get("spec") or {}).get("renewTime") or ""), now)

    @staticmethod
    def _lease_node(obj: Any) -> str:
        if not isinstance(obj, dict):
            return ""
        holder = (obj.get("spec") or {}).get("holderIdentity")
        name = (obj.get("metadata") or {}).get("name") or ""
        return str(holder or (name[len(LEASE_PREFIX) :] if name.startswith(LEASE_PREFIX) else ""))

    async def _watch_gpunodes(self) -> None:
        custom = self.custom

        async def list_gpunodes(**kw: Any) -> Any:
            return await list_json(custom.list_cluster_custom_object)(GROUP, VERSION, "gpunodes", **kw)

        async for ev in resumable_watch(list_gpunodes, health=self.gpunode_health):
            objs = ev.items if ev.type == "RELISTED" else [ev.object]
            if ev.type == "RELISTED":
                self.gpunodes.clear()
            for o in objs:
                if not isinstance(o, dict):
                    continue
                name = o["metadata"]["name"]
                if ev.type == "DELETED":
                    self.gpunodes.pop(name, None)
                    continue
                status = o.get("status") or {}
                self.gpunodes[name] = {
                    "uid": o["metadata"].get("uid"),
                    "state": (status.get("hypervisorStatus") or {}).get("hypervisorState"),
                    "phase": status.get("phase"),
                }
