"""gRPC: NodeAgentService (hypervisor -> controller) and CapacityService (gpuctl, lens -> controller)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import grpc.aio

from gpuplane.controller.v1 import (
    capacity_pb2,
    capacity_pb2_grpc,
    node_agent_pb2,
    node_agent_pb2_grpc,
    types_pb2,
)
from gpuplane_controller.domain.model import Allocation, Amount
from gpuplane_controller.domain.podrequest import SCHEDULER_NAME
from gpuplane_controller.k8s.heartbeats import Heartbeats
from gpuplane_controller.k8s.inventory import ISOLATION_NAMES, DeviceReport, Inventory, gpu_object_name
from gpuplane_controller.manifest import parse_manifest
from gpuplane_controller.state import ClusterState, fmt_tflops, fmt_vram
from gpuplane_core.errors import InvalidSpec, NotFound

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 10
# Stream revisions are `epoch << 40 | allocator revision`: the epoch is random per process, so a
# revision from another replica or an earlier run of this one never resumes here by mistake.
EPOCH_SHIFT = 40
LOCAL_MASK = (1 << EPOCH_SHIFT) - 1
QOS = {"low": 1, "medium": 2, "high": 3, "critical": 4}
ISOLATION = {v: k for k, v in ISOLATION_NAMES.items()}
Event = node_agent_pb2.AllocationEvent


def _resources(a: Amount) -> types_pb2.Resources:
    return types_pb2.Resources(
        tflops=fmt_tflops(a.tflops_m) if a.tflops_m else "",
        vram=fmt_vram(a.vram) if a.vram else "",
        compute_percent=fmt_tflops(a.percent_m) if a.percent_m else "",
    )


def _devices(devs: Any) -> list[DeviceReport]:
    return [
        DeviceReport(
            uuid=d.uuid,
            vendor=d.vendor,
            model=d.model,
            index=d.index,
            numa_node=d.numa_node,
            total_memory_bytes=d.total_memory_bytes,
            max_tflops=d.max_tflops,
            healthy=d.healthy,
            unhealthy_reason=d.unhealthy_reason,
            isolation_mode=ISOLATION_NAMES.get(d.isolation_mode, ""),
        )
        for d in devs
    ]


class NodeAgent(node_agent_pb2_grpc.NodeAgentServiceServicer):
    def __init__(
        self,
        state: ClusterState,
        inventory: Inventory,
        heartbeats: Heartbeats | None = None,
        heartbeat_interval: int = HEARTBEAT_SECONDS,
        history: int = 10000,
    ) -> None:
        self.state = state
        self.inventory = inventory
        self.heartbeats = heartbeats
        self.heartbeat_interval = heartbeat_interval
        self.registered: dict[str, tuple[str, dict[str, bool]]] = {}  # node -> (version, {uuid: healthy})
        # Recent allocation changes (local revision, kind, allocation), for resumed streams.
        self.epoch = secrets.randbits(22) + 1
        self._history: deque[tuple[int, str, Allocation]] = deque()
        self._history_max = history
        self._history_floor = 0  # newest revision no longer in the history
        state.allocator.listeners.append(self._record)

    def _record(self, kind: str, a: Allocation, revision: int) -> None:
        if self._history_max <= 0:
            self._history_floor = revision
            return
        if len(self._history) >= self._history_max:
            self._history_floor = self._history.popleft()[0]
        self._history.append((revision, kind, a))

    def wire_revision(self, local: int) -> int:
        return (self.epoch << EPOCH_SHIFT) | local

    def _resumable(self, resume: int, current: int) -> bool:
        if resume <= 0 or resume >> EPOCH_SHIFT != self.epoch:
            return False
        return self._history_floor <= (resume & LOCAL_MASK) <= current

    def _available(self) -> dict[str, tuple[str, str]]:
        return {
            n: (fmt_tflops(g.available_tflops_m), fmt_vram(g.available_vram))
            for n, g in self.state.allocator.gpus.items()
        }

    async def RegisterNode(
        self, request: node_agent_pb2.RegisterNodeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> node_agent_pb2.RegisterNodeResponse:
        if not request.node_name:
            raise InvalidSpec("node_name is required", field="node_name")
        devices = _devices(request.devices)
        await self.inventory.report_devices(
            request.node_name, devices, request.hypervisor_version, self._available()
        )
        self.registered[request.node_name] = (
            request.hypervisor_version,
            {d.uuid: d.healthy for d in devices},
        )
        if self.heartbeats is not None:
            await self.heartbeats.beat(request.node_name, request.hypervisor_version, registered=True)
        return node_agent_pb2.RegisterNodeResponse(heartbeat_interval_seconds=self.heartbeat_interval)

    async def Heartbeat(
        self, request: node_agent_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> node_agent_pb2.HeartbeatResponse:
        known = self.registered.get(request.node_name)
        if known is None:
            raise NotFound(
                f"node {request.node_name} is not registered; call RegisterNode", field="node_name"
            )
        version, health = known
        devices = _devices(request.devices)
        if {d.uuid for d in devices} - set(health):
            # New devices appeared: a full report, as RegisterNode does.
            await self.inventory.report_devices(request.node_name, devices, version, self._available())
            self.registered[request.node_name] = (version, {d.uuid: d.healthy for d in devices})
            if self.heartbeats is not None:
                await self.heartbeats.beat(request.node_name, version, registered=True)
            return node_agent_pb2.HeartbeatResponse()
        for d in devices:
            if health.get(d.uuid) != d.healthy:
                phase = "Running" if d.healthy else "Unknown"
                msg = "device healthy" if d.healthy else (d.unhealthy_reason or "device unhealthy")
                await self.inventory.set_phase(gpu_object_name(d.uuid), phase, msg)
                health[d.uuid] = d.healthy
        if self.heartbeats is not None:
            healthy = {gpu_object_name(u): h for u, h in health.items()}
            await self.heartbeats.beat(request.node_name, version, healthy=healthy)
        return node_agent_pb2.HeartbeatResponse()

    def _message(self, alloc: Allocation) -> node_agent_pb2.Allocation:
        r = alloc.req
        gpus = self.state.allocator.gpus
        return node_agent_pb2.Allocation(
            pod_uid=r.pod.uid,
            namespace=r.pod.namespace,
            pod_name=r.pod.name,
            gpu_names=list(alloc.gpus),
            gpu_uuids=[gpus[n].uuid if n in gpus else n for n in alloc.gpus],
            request=_resources(r.request),
            limit=_resources(r.limit),
            qos=QOS.get(r.qos, 0),  # type: ignore[arg-type]
            isolation=ISOLATION.get(r.isolation, 0),  # type: ignore[arg-type]
            gpu_count=len(alloc.gpus),
            workload=r.workload,
            pool=r.pool,
        )

    async def WatchAllocations(
        self, request: node_agent_pb2.WatchAllocationsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[node_agent_pb2.AllocationEvent]:
        node = request.node_name
        if not node:
            raise InvalidSpec("node_name is required", field="node_name")
        alloc = self.state.allocator
        queue: asyncio.Queue[tuple[str, Allocation, int]] = asyncio.Queue()

        def listener(kind: str, a: Allocation, revision: int) -> None:
            if a.node == node:
                queue.put_nowait((kind, a, revision))

        # Snapshot (or history slice) and subscription happen in one synchronous step, so no
        # change is missed and none is sent twice.
        alloc.listeners.append(listener)
        current = alloc.revision
        wire = self.wire_revision
        deltas: list[tuple[int, str, Allocation]] | None = None
        if self._resumable(request.resume_revision, current):
            since = request.resume_revision & LOCAL_MASK
            deltas = [(r, k, a) for r, k, a in self._history if r > since and a.node == node]
        snapshot = [a for a in alloc.allocations.values() if a.node == node] if deltas is None else []
        try:
            if deltas is None:
                # Unknown, foreign or too old a revision (or none): a full listing.
                yield Event(type=Event.TYPE_RESET, revision=wire(current))
                for a in snapshot:
                    yield Event(type=Event.TYPE_ADDED, revision=wire(current), allocation=self._message(a))
            else:
                for rev, kind, a in deltas:
                    yield self._event(kind, a, wire(rev))
            yield Event(type=Event.TYPE_SYNCED, revision=wire(current))
            while True:
                kind, a, rev = await queue.get()
                yield self._event(kind, a, wire(rev))
        finally:
            alloc.listeners.remove(listener)

    def _event(self, kind: str, a: Allocation, revision: int) -> node_agent_pb2.AllocationEvent:
        if kind == "DELETED":
            msg = node_agent_pb2.Allocation(
                pod_uid=a.req.pod.uid, namespace=a.req.pod.namespace, pod_name=a.req.pod.name
            )
            return Event(type=Event.TYPE_DELETED, revision=revision, allocation=msg)
        return Event(type=Event.TYPE_ADDED, revision=revision, allocation=self._message(a))


class Capacity(capacity_pb2_grpc.CapacityServiceServicer):
    def __init__(self, state: ClusterState) -> None:
        self.state = state

    async def GetPoolCapacity(
        self, request: capacity_pb2.GetPoolCapacityRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> capacity_pb2.GetPoolCapacityResponse:
        alloc = self.state.allocator
        names = alloc.pool_names()
        if request.pool:
            if request.pool not in names:
                raise NotFound(f"GPU pool {request.pool} not found", field="pool")
            names = [request.pool]
        pools = []
        for name in names:
            gpus = alloc.pool_gpus(name)
            pools.append(
                capacity_pb2.PoolCapacity(
                    name=name,
                    total_tflops=fmt_tflops(sum(g.virtual_tflops_m for g in gpus)),
                    total_vram=fmt_vram(sum(g.capacity_vram for g in gpus)),
                    available_tflops=fmt_tflops(sum(g.available_tflops_m for g in gpus)),
                    available_vram=fmt_vram(sum(g.available_vram for g in gpus)),
                    gpu_count=len(gpus),
                    allocated_gpu_count=sum(1 for g in gpus if alloc.gpu_workers(g.name)),
                    gpu_models=sorted({g.model for g in gpus if g.model}),
                )
            )
        return capacity_pb2.GetPoolCapacityResponse(pools=pools)

    async def ListGpuAllocations(
        self, request: capacity_pb2.ListGpuAllocationsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> capacity_pb2.ListGpuAllocationsResponse:
        alloc = self.state.allocator
        out = []
        for g in sorted(alloc.gpus.values(), key=lambda g: (g.node, g.name)):
            if (request.node_name and g.node != request.node_name) or (
                request.pool and g.pool != request.pool
            ):
                continue
            out.append(
                capacity_pb2.GpuAllocation(
                    gpu_name=g.name,
                    node_name=g.node,
                    uuid=g.uuid,
                    model=g.model,
                    vendor=g.vendor,
                    pool=g.pool,
                    phase=g.phase,
                    capacity=types_pb2.Resources(
                        tflops=fmt_tflops(g.virtual_tflops_m), vram=fmt_vram(g.capacity_vram)
                    ),
                    available=types_pb2.Resources(
                        tflops=fmt_tflops(g.available_tflops_m), vram=fmt_vram(g.available_vram)
                    ),
                    workers=[
                        capacity_pb2.WorkerRef(
                            pod_uid=a.req.pod.uid,
                            namespace=a.req.pod.namespace,
                            pod_name=a.req.pod.name,
                            request=_resources(a.req.request),
                            limit=_resources(a.req.limit),
                        )
                        for a in alloc.gpu_workers(g.name)
                    ],
                )
            )
        return capacity_pb2.ListGpuAllocationsResponse(gpus=out)

    async def SimulateSchedule(
        self, request: capacity_pb2.SimulateScheduleRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> capacity_pb2.SimulateScheduleResponse:
        pod = parse_manifest(request.pod_manifest)
        if (
            isinstance(pod, dict)
            and isinstance(pod.get("spec"), dict)
            and not pod["spec"].get("schedulerName")
        ):
            pod["spec"]["schedulerName"] = SCHEDULER_NAME  # gpuctl asks about its own fractional pods
        d = self.state.simulate(pod)
        return capacity_pb2.SimulateScheduleResponse(
            schedulable=d.ok,
            node_name=d.node,
            gpu_names=d.gpus,
            failed_filter=d.failed_filter if not d.ok else "",
            message=d.error if not d.ok else f"fits on {d.node}: {', '.join(d.gpus)}",
            filter_stages=[
                capacity_pb2.FilterStage(
                    name=s.name,
                    before_count=len(s.before),
                    after_count=len(s.after),
                    removed_gpu_names=sorted(set(s.before) - set(s.after)),
                )
                for s in d.stages
            ],
        )
