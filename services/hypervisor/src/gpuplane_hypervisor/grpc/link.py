"""The hypervisor's side of NodeAgentService: register, heartbeat, watch allocations.

Two loops share one channel. Unary calls get their deadline and retries from
the NODE_AGENT policy; the allocation stream reconnects with the
WATCH_ALLOCATIONS backoff and resumes from the last revision. While the
controller is away the agent keeps serving its last known state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import grpc.aio
from google.protobuf.timestamp_pb2 import Timestamp

from gpuplane.controller.v1 import node_agent_pb2 as pb
from gpuplane.controller.v1 import node_agent_pb2_grpc as pb_grpc
from gpuplane_core.errors import NotFound
from gpuplane_core.grpc.client import (
    NODE_AGENT,
    WATCH_ALLOCATIONS,
    backoff_delays,
    call_options,
    make_channel,
)
from gpuplane_core.grpc.errors import error_from_rpc
from gpuplane_hypervisor.domain.models import (
    Allocation,
    AllocationEvent,
    DeviceInfo,
    DeviceSample,
    Registration,
)
from gpuplane_hypervisor.grpc.convert import device_to_pb, event_from_pb, worker_usage_pb

log = logging.getLogger(__name__)


# What a heartbeat reports: devices, allocations, registrations, latest samples by device UUID.
Snapshot = tuple[list[DeviceInfo], list[Allocation], list[Registration], dict[str, DeviceSample]]


@dataclass
class LinkStatus:
    registered: bool = False
    streaming: bool = False
    last_error: str = ""
    last_heartbeat: float = 0.0
    reconnects: int = 0


class ControllerLink:
    def __init__(
        self,
        target: str,
        node_name: str,
        version: str,
        snapshot: Callable[[], Snapshot],
        on_event: Callable[[AllocationEvent], None],
        resume_revision: Callable[[], int],
        heartbeat_interval: float,
    ) -> None:
        self._target = target
        self._node = node_name
        self._version = version
        self._snapshot = snapshot
        self._on_event = on_event
        self._resume_revision = resume_revision
        self._interval = heartbeat_interval
        self._channel = make_channel(target, NODE_AGENT, WATCH_ALLOCATIONS)
        self._stub = pb_grpc.NodeAgentServiceStub(self._channel)
        self._tasks: list[asyncio.Task[None]] = []
        self._kick = asyncio.Event()
        self.status = LinkStatus()

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._heartbeat_loop(), name="controller-heartbeat"),
            asyncio.create_task(self._watch_loop(), name="controller-watch"),
        ]

    def inventory_changed(self) -> None:
        """Re-register now (devices appeared, vanished or changed health)."""
        self.status.registered = False
        self._kick.set()

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._channel.close()

    async def _heartbeat_loop(self) -> None:
        delays = backoff_delays(NODE_AGENT)
        while True:
            devices, allocations, registrations, samples = self._snapshot()
            try:
                if not self.status.registered:
                    resp = await self._stub.RegisterNode(
                        pb.RegisterNodeRequest(
                            node_name=self._node,
                            hypervisor_version=self._version,
                            devices=[device_to_pb(d) for d in devices],
                        ),
                        **call_options(NODE_AGENT),
                    )
                    if resp.heartbeat_interval_seconds:
                        self._interval = float(resp.heartbeat_interval_seconds)
                    self.status.registered = True
                    log.info("registered node %s with %d devices", self._node, len(devices))
                ts = Timestamp()
                ts.FromNanoseconds(time.time_ns())
                await self._stub.Heartbeat(
                    pb.HeartbeatRequest(
                        node_name=self._node,
                        devices=[device_to_pb(d) for d in devices],
                        workers=worker_usage_pb(allocations, registrations, samples),
                        timestamp=ts,
                    ),
                    **call_options(NODE_AGENT),
                )
                self.status.last_heartbeat = time.time()
                self.status.last_error = ""
                delays = backoff_delays(NODE_AGENT)
                wait = self._interval
            except grpc.aio.AioRpcError as e:
                err = error_from_rpc(e)
                self.status.last_error = f"{e.code().name}: {err.message}"
                if isinstance(err, NotFound):
                    # The controller forgot us (it restarted): register again right away.
                    self.status.registered = False
                    wait = 0.0
                else:
                    self.status.registered = False
                    wait = next(delays)
                    log.warning(
                        "controller register/heartbeat failed (%s), retrying in %.1fs", err.message, wait
                    )
            self._kick.clear()
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=wait)
            except TimeoutError:
                pass

    async def _watch_loop(self) -> None:
        delays = backoff_delays(WATCH_ALLOCATIONS)
        while True:
            call = self._stub.WatchAllocations(
                pb.WatchAllocationsRequest(node_name=self._node, resume_revision=self._resume_revision()),
                **call_options(WATCH_ALLOCATIONS),
            )
            try:
                async for raw in call:
                    if not self.status.streaming:
                        self.status.streaming = True
                        delays = backoff_delays(WATCH_ALLOCATIONS)
                    event = event_from_pb(raw)
                    if event is not None:
                        self._on_event(event)
                log.info("allocation stream ended by the controller; reconnecting")
            except grpc.aio.AioRpcError as e:
                self.status.last_error = f"watch: {e.code().name}: {e.details()}"
                log.warning("allocation stream broke: %s", self.status.last_error)
            finally:
                call.cancel()
            self.status.streaming = False
            self.status.reconnects += 1
            await asyncio.sleep(next(delays))
