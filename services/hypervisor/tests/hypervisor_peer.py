"""A real NodeAgentService server on loopback, the protocol peer the hypervisor's client talks to.

It is not the controller: it serves scripted allocation streams so reconnect and
resume behaviour can be tested before (and independently of) the real controller.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc.aio

from gpuplane.controller.v1 import node_agent_pb2 as pb
from gpuplane.controller.v1 import node_agent_pb2_grpc as pb_grpc
from gpuplane.controller.v1 import types_pb2 as types
from gpuplane_core.errors import NotFound
from gpuplane_core.grpc.server import bound_port, make_server

Event = pb.AllocationEvent


def alloc_pb(pod_uid: str, uuids: list[str], *, tflops: str = "100", vram: str = "8Gi") -> pb.Allocation:
    return pb.Allocation(
        pod_uid=pod_uid,
        namespace="ns",
        pod_name=f"pod-{pod_uid}",
        gpu_names=[f"gpu-{i}" for i in range(len(uuids))],
        gpu_uuids=uuids,
        request=types.Resources(tflops=tflops, vram=vram),
        limit=types.Resources(tflops="200", vram="16Gi"),
        qos=types.QOS_LEVEL_LOW,
        isolation=types.ISOLATION_MODE_SOFT,
        gpu_count=len(uuids),
        pool="pool-a",
    )


class PeerServicer(pb_grpc.NodeAgentServiceServicer):
    def __init__(self, opening: list[pb.AllocationEvent]) -> None:
        self.opening = opening
        self.registers: list[pb.RegisterNodeRequest] = []
        self.heartbeats: list[pb.HeartbeatRequest] = []
        self.watch_requests: list[pb.WatchAllocationsRequest] = []
        self.live: asyncio.Queue[pb.AllocationEvent] = asyncio.Queue()
        self.registered: set[str] = set()

    async def RegisterNode(self, request: pb.RegisterNodeRequest, context: Any) -> pb.RegisterNodeResponse:
        self.registers.append(request)
        self.registered.add(request.node_name)
        return pb.RegisterNodeResponse(heartbeat_interval_seconds=1)

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        if request.node_name not in self.registered:
            raise NotFound("node not registered")
        self.heartbeats.append(request)
        return pb.HeartbeatResponse()

    async def WatchAllocations(
        self, request: pb.WatchAllocationsRequest, context: Any
    ) -> AsyncIterator[pb.AllocationEvent]:
        self.watch_requests.append(request)
        for event in self.opening:
            yield event
        while True:
            yield await self.live.get()


class Peer:
    def __init__(self, servicer: PeerServicer, port: int = 0) -> None:
        self.servicer = servicer
        self.server: grpc.aio.Server = make_server(port, "127.0.0.1")
        pb_grpc.add_NodeAgentServiceServicer_to_server(servicer, self.server)
        self.port = bound_port(self.server)

    async def start(self) -> Peer:
        await self.server.start()
        return self

    async def stop(self) -> None:
        await self.server.stop(grace=0)
