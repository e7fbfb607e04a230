"""Reconnect-safe WatchAllocations: resuming from a revision the server can serve sends deltas only
(then live events); a foreign (other replica, restarted process), future or dropped revision gets a
full listing. In process over a real Allocator, and over gRPC against the devcluster."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from controller_testkit import GROUP, VERSION, ControllerProc, create_pod, device, wait_bound
from kubernetes_asyncio import client

from gpuplane.controller.v1 import node_agent_pb2, node_agent_pb2_grpc
from gpuplane_controller.domain.model import AllocRequest, Amount, PodRef
from gpuplane_controller.grpc.servicers import EPOCH_SHIFT, NodeAgent
from gpuplane_controller.state import ClusterState
from gpuplane_core.grpc.client import NODE_AGENT, WATCH_ALLOCATIONS, make_channel

Event = node_agent_pb2.AllocationEvent


def _req(uid: str) -> AllocRequest:
    return AllocRequest(
        pod=PodRef(uid=uid, namespace="ns", name=uid), pool="p", request=Amount(1000, 1), limit=Amount()
    )


async def _take(agent: NodeAgent, node: str, resume: int) -> list[Any]:
    """Events up to and including SYNCED."""
    gen = agent.WatchAllocations(
        node_agent_pb2.WatchAllocationsRequest(node_name=node, resume_revision=resume), None
    )  # type: ignore[arg-type]
    out = []
    async for ev in gen:
        out.append(ev)
        if ev.type == Event.TYPE_SYNCED:
            break
    await gen.aclose()
    return out


def _kinds(events: list[Any]) -> list[tuple[str, str]]:
    return [(Event.Type.Name(e.type), e.allocation.pod_uid) for e in events]


async def test_resume_sends_deltas_only_else_full_listing() -> None:
    state = ClusterState()
    agent = NodeAgent(state, inventory=None, history=3)  # type: ignore[arg-type]
    alloc = state.allocator
    alloc.reserve(_req("a"), "n1", ["g1"])
    first = await _take(agent, "n1", 0)
    assert _kinds(first) == [("TYPE_RESET", ""), ("TYPE_ADDED", "a"), ("TYPE_SYNCED", "")]
    seen = first[-1].revision
    assert seen >> EPOCH_SHIFT == agent.epoch

    alloc.reserve(_req("b"), "n1", ["g2"])
    alloc.reserve(_req("x"), "n2", ["g9"])  # another node: not in this node's deltas
    alloc.release("a")
    resumed = await _take(agent, "n1", seen)
    assert _kinds(resumed) == [("TYPE_ADDED", "b"), ("TYPE_DELETED", "a"), ("TYPE_SYNCED", "")]
    assert resumed[-1].revision > seen

    # Nothing new since: SYNCED alone.
    assert _kinds(await _take(agent, "n1", resumed[-1].revision)) == [("TYPE_SYNCED", "")]

    # Another replica's (or a previous process') revision, a future one, a dropped one: full listing.
    foreign = seen ^ (1 << (EPOCH_SHIFT + 3))
    future = resumed[-1].revision + 100
    for resume in (foreign, future, seen):
        if resume == seen:
            for i in range(4):  # push `seen` out of the 3-entry history
                alloc.reserve(_req(f"c{i}"), "n3", ["g7"])
        got = await _take(agent, "n1", resume)
        assert _kinds(got) == [("TYPE_RESET", ""), ("TYPE_ADDED", "b"), ("TYPE_SYNCED", "")], resume


# ---- against the devcluster: a hypervisor's reconnects ----------------------------------------------
async def _read_until_synced(stream: Any) -> list[Any]:
    out = []
    while True:
        ev = await asyncio.wait_for(stream.read(), 15)
        out.append(ev)
        if ev.type == Event.TYPE_SYNCED:
            return out


async def test_reconnect_resumes_with_deltas_and_restart_relists(
    controller: ControllerProc, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    pool = await make_pool(nodes=1, gpus_per_node=0)
    node = pool.nodes[0]
    custom = client.CustomObjectsApi(kube_api)
    core = client.CoreV1Api(kube_api)
    try:
        async with make_channel(controller.grpc_target, NODE_AGENT, WATCH_ALLOCATIONS) as ch:
            agent = node_agent_pb2_grpc.NodeAgentServiceStub(ch)
            await agent.RegisterNode(
                node_agent_pb2.RegisterNodeRequest(
                    node_name=node, hypervisor_version="t", devices=[device(node, 0)]
                )
            )
            pool.gpus[node] = [f"gpu-{node}-0"]
            await create_pod(kube_api, namespace, "a", pool.name, tflops_request="10", vram_request="1Gi")
            a = await wait_bound(kube_api, namespace, "a", timeout=60)

            stream = agent.WatchAllocations(node_agent_pb2.WatchAllocationsRequest(node_name=node))
            first = await _read_until_synced(stream)
            assert _kinds(first) == [("TYPE_RESET", ""), ("TYPE_ADDED", a.metadata.uid), ("TYPE_SYNCED", "")]
            seen = first[-1].revision
            stream.cancel()

            # While the hypervisor is away: b is placed, a goes away.
            await create_pod(kube_api, namespace, "b", pool.name, tflops_request="10", vram_request="1Gi")
            b = await wait_bound(kube_api, namespace, "b", timeout=60)
            await core.delete_namespaced_pod("a", namespace, grace_period_seconds=0)
            for _ in range(100):
                if a.metadata.uid not in (await _allocated(controller)):
                    break
                await asyncio.sleep(0.1)

            stream = agent.WatchAllocations(
                node_agent_pb2.WatchAllocationsRequest(node_name=node, resume_revision=seen)
            )
            resumed = await _read_until_synced(stream)
            assert _kinds(resumed) == [
                ("TYPE_ADDED", b.metadata.uid),
                ("TYPE_DELETED", a.metadata.uid),
                ("TYPE_SYNCED", ""),
            ]
            latest = resumed[-1].revision
            # ... and live deltas follow on the same stream.
            await create_pod(kube_api, namespace, "c", pool.name, tflops_request="10", vram_request="1Gi")
            c = await wait_bound(kube_api, namespace, "c", timeout=60)
            ev = await asyncio.wait_for(stream.read(), 15)
            assert (
                ev.type == Event.TYPE_ADDED
                and ev.allocation.pod_uid == c.metadata.uid
                and ev.revision > latest
            )
            stream.cancel()

        # A restarted controller cannot serve the old revision: full listing of what holds now.
        controller.stop()
        controller.start()
        async with make_channel(controller.grpc_target, NODE_AGENT, WATCH_ALLOCATIONS) as ch:
            agent = node_agent_pb2_grpc.NodeAgentServiceStub(ch)
            stream = agent.WatchAllocations(
                node_agent_pb2.WatchAllocationsRequest(node_name=node, resume_revision=ev.revision)
            )
            relisted = await _read_until_synced(stream)
            stream.cancel()
        assert relisted[0].type == Event.TYPE_RESET
        assert sorted(e.allocation.pod_uid for e in relisted if e.type == Event.TYPE_ADDED) == sorted(
            [b.metadata.uid, c.metadata.uid]
        )
    finally:
        await custom.delete_cluster_custom_object(GROUP, VERSION, "gpunodes", node)


async def _allocated(controller: ControllerProc) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as http:
        body: dict[str, Any] = (await http.get(f"{controller.url}/api/allocation")).json()["allocation"]
        return body
