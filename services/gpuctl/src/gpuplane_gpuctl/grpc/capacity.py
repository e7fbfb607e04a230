"""Client of the controller's CapacityService (flow 2: gpuctl -> controller)."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import grpc.aio

from gpuplane.controller.v1 import capacity_pb2, capacity_pb2_grpc
from gpuplane_core.errors import GpuplaneError, NotReady
from gpuplane_core.grpc.client import CAPACITY, SIMULATE, call_options, make_channel
from gpuplane_core.grpc.errors import error_from_rpc
from gpuplane_gpuctl.domain.inventory import Gpu


@dataclass(frozen=True)
class SimulateResult:
    schedulable: bool
    node_name: str
    gpu_names: list[str]
    failed_filter: str
    message: str


@dataclass(frozen=True)
class GpuCapacity:
    name: str
    node: str
    model: str
    pool: str
    tflops: str
    vram: str


def _error(e: grpc.aio.AioRpcError, target: str) -> GpuplaneError:
    if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return NotReady(
            f"GPU controller at {target} is unreachable ({e.code().name}); fractional jobs need it"
        )
    return error_from_rpc(e)


class CapacityClient:
    def __init__(self, target: str) -> None:
        self.target = target
        self.channel = make_channel(target, CAPACITY, SIMULATE)
        self.stub = capacity_pb2_grpc.CapacityServiceStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()

    async def simulate(self, pod_manifest: bytes) -> SimulateResult:
        try:
            r = await self.stub.SimulateSchedule(
                capacity_pb2.SimulateScheduleRequest(pod_manifest=pod_manifest), **call_options(SIMULATE)
            )
        except grpc.aio.AioRpcError as e:
            raise _error(e, self.target) from None
        return SimulateResult(
            schedulable=r.schedulable,
            node_name=r.node_name,
            gpu_names=list(r.gpu_names),
            failed_filter=r.failed_filter,
            message=r.message,
        )

    async def gpus(self, pool: str | None) -> list[GpuCapacity]:
        try:
            r = await self.stub.ListGpuAllocations(
                capacity_pb2.ListGpuAllocationsRequest(pool=pool or ""), **call_options(CAPACITY)
            )
        except grpc.aio.AioRpcError as e:
            raise _error(e, self.target) from None
        return [
            GpuCapacity(g.gpu_name, g.node_name, g.model, g.pool, g.capacity.tflops, g.capacity.vram)
            for g in r.gpus
        ]

    async def allocations(self) -> list[Gpu]:
        """Every GPU the controller knows, with its fractional workers (for gpu-detail and usage)."""
        try:
            r = await self.stub.ListGpuAllocations(
                capacity_pb2.ListGpuAllocationsRequest(), **call_options(CAPACITY)
            )
        except grpc.aio.AioRpcError as e:
            raise _error(e, self.target) from None
        return [
            Gpu(
                name=g.gpu_name,
                node=g.node_name,
                model=g.model,
                vram=g.capacity.vram,
                tflops=g.capacity.tflops,
                available_tflops=g.available.tflops,
                available_vram=g.available.vram,
                workers=[f"{w.namespace}/{w.pod_name}" for w in g.workers],
            )
            for g in r.gpus
        ]
