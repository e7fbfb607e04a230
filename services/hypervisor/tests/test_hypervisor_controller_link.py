"""The controller link against a real NodeAgentService server on loopback (the protocol peer):
register, heartbeat with usage, allocation stream -> workers, reconnect with resume, restart."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

import httpx
from hypervisor_peer import Event, Peer, PeerServicer, alloc_pb
from hypervisor_testkit import GIB, agent_of, running

from gpuplane_hypervisor.domain.models import Registration
from gpuplane_hypervisor.gpu.simulated import SimulatedBackend
from gpuplane_hypervisor.host.procfs import ProcFs
from gpuplane_hypervisor.settings import Settings


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool], timeout: float = 10.0
) -> float:
    """Seconds until ``check`` held; fails after ``timeout``."""
    start = time.monotonic()
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.02)


async def worker_ids(client: httpx.AsyncClient) -> set[str]:
    return {w["WorkerUID"] for w in (await client.get("/api/v1/workers")).json()["data"]}


async def test_stream_reconnect_resume_and_last_known_state(
    settings_factory: Callable[..., Settings],
) -> None:
    # Device UUIDs of the simulated node are deterministic, so the peer can script them up front.
    uuids = [d.uuid for d in SimulatedBackend("4xH100-80GB", "gpu-node-0").discover()]
    first = PeerServicer(
        [
            Event(type=Event.TYPE_RESET, revision=3),
            Event(type=Event.TYPE_ADDED, revision=3, allocation=alloc_pb("a", uuids[:1])),
            Event(type=Event.TYPE_SYNCED, revision=3),
        ]
    )
    peer = await Peer(first).start()
    settings = settings_factory(controller=f"127.0.0.1:{peer.port}")
    try:
        async with running(settings) as (app, client):
            agent = agent_of(app)
            await eventually(lambda: bool(first.registers))
            reg = first.registers[0]
            assert reg.node_name == "gpu-node-0" and [d.uuid for d in reg.devices] == uuids
            assert reg.devices[0].max_tflops == 989.0 and reg.devices[0].healthy
            assert first.watch_requests[0].resume_revision == 0
            await eventually(lambda: _has(client, {"a"}))
            assert (await client.get("/readyz")).json() == {"status": "ready"}
            worker = (await client.get("/api/v1/workers/a")).json()["data"]
            assert worker["Requests"] == {"tflops": 100.0, "vram": 8 * GIB} and worker["QoS"] == "low"

            # A live ADDED shows up in /api/v1/workers well within a second.
            await first.live.put(
                Event(type=Event.TYPE_ADDED, revision=4, allocation=alloc_pb("b", uuids[1:2]))
            )
            assert await eventually(lambda: _has(client, {"a", "b"}), timeout=1.0) < 1.0

            # Heartbeats carry per-worker usage of the registered processes.
            backend = agent.backend
            assert isinstance(backend, SimulatedBackend)
            # A live process (this one), so the agent does not prune the registration as exited.
            me = os.getpid()
            backend.set_process(uuids[1], me, 3 * GIB, 40.0)
            agent.registrations[me] = Registration(
                me, 7, "main", "b", "pod-b", "ns", ProcFs().start_ticks(me) or 0
            )
            await eventually(lambda: any(_usage(h, "b") for h in first.heartbeats), timeout=5.0)
            (proc,) = next(_usage(h, "b") for h in first.heartbeats if _usage(h, "b"))
            assert (proc.device_uuid, proc.pid, proc.memory_bytes, proc.compute_percent) == (
                uuids[1],
                me,
                3 * GIB,
                40.0,
            )
            del agent.registrations[me]

            # The controller forgets the node without dropping the connection (it restarted behind a
            # proxy): the heartbeat answers NOT_FOUND and the hypervisor registers again.
            count = len(first.registers)
            first.registered.clear()
            await eventually(lambda: len(first.registers) > count, timeout=5.0)

            # The controller goes away: the last known state keeps being served.
            await peer.stop()
            await asyncio.sleep(0.5)
            assert await worker_ids(client) == {"a", "b"}
            assert (await client.get("/readyz")).status_code == 200

            # It comes back on the same address; the stream resumes from revision 4.
            second = PeerServicer(
                [
                    Event(type=Event.TYPE_DELETED, revision=5, allocation=alloc_pb("a", uuids[:1])),
                    Event(type=Event.TYPE_SYNCED, revision=5),
                ]
            )
            peer = await Peer(second, port=peer.port).start()
            await eventually(lambda: _has(client, {"b"}), timeout=40.0)
            assert second.watch_requests[0].resume_revision == 4
            await eventually(lambda: bool(second.registers), timeout=40.0)
    finally:
        await peer.stop()

    # A restart while the controller is unreachable serves the saved allocations.
    async with running(settings_factory(controller="127.0.0.1:1")) as (_, client):
        assert await worker_ids(client) == {"b"}
        assert (await client.get("/readyz")).status_code == 200


async def _has(client: httpx.AsyncClient, expected: set[str]) -> bool:
    return await worker_ids(client) == expected


def _usage(heartbeat, pod_uid: str):  # type: ignore[no-untyped-def]
    return [p for w in heartbeat.workers if w.pod_uid == pod_uid for p in w.processes]


async def test_fresh_node_is_not_ready_until_the_controller_lists(
    settings_factory: Callable[..., Settings],
) -> None:
    async with running(settings_factory(controller="127.0.0.1:1")) as (_, client):
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and "allocation listing" in ready.json()["error"]
        assert (await client.get("/api/v1/devices")).status_code == 200
