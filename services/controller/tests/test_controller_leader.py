"""Leader election between two real `tf-controller` processes: exactly one leader answers the
assign endpoints (the other 503), SIGKILL of the leader hands over within the Lease time with
port assignments still unique, and only the leader schedules and binds pods."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import timedelta
from typing import Any

import aiohttp
import httpx
from controller_components_kit import FAST_LEASE, Ctl, start_controller
from controller_testkit import create_pod, wait_bound
from kubernetes_asyncio import client

LEASE_S = float(FAST_LEASE["GPUPLANE_CONTROLLER_LEASE_DURATION_SECONDS"])
NOT_LEADER = {"error": "current instance is not the leader"}


async def _lease_holder(kube_api: Any, namespace: str) -> str | None:
    lease = await client.CoordinationV1Api(kube_api).read_namespaced_lease(
        "gpuplane-controller-leader", namespace
    )
    return lease.spec.holder_identity


async def _start_two(devcluster: Any, namespace: str) -> tuple[Ctl, Ctl]:
    a, b = await asyncio.gather(
        asyncio.to_thread(start_controller, devcluster, namespace, "ctl-a"),
        asyncio.to_thread(start_controller, devcluster, namespace, "ctl-b"),
    )
    return a, b


async def _one_leader(ctls: list[Ctl], timeout: float = 20) -> tuple[Ctl, Ctl]:
    deadline = time.monotonic() + timeout
    while True:
        leaders = [c for c in ctls if await asyncio.to_thread(c.is_leader)]
        if len(leaders) == 1:
            leader = leaders[0]
            return leader, next(c for c in ctls if c is not leader)
        assert len(leaders) < 2, "two leaders at once"
        assert time.monotonic() < deadline, "no leader elected"
        await asyncio.sleep(0.1)


async def _assign(
    http: aiohttp.ClientSession, ctl: Ctl, auth: dict[str, str], pods: list[str]
) -> dict[str, int]:
    async def one(pod: str) -> tuple[str, int]:
        async with http.post(f"{ctl.url}/api/assign-host-port", params={"podName": pod}, headers=auth) as r:
            text = await r.text()
            assert r.status == 200, text
            return pod, int(text)

    return dict(await asyncio.gather(*(one(p) for p in pods)))


async def test_one_leader_and_failover_keeps_ports_unique(
    devcluster: Any, kube_api: Any, namespace: str, mint_token: Any
) -> None:
    # Started at the same time: they race for the Lease.
    a, b = await _start_two(devcluster, namespace)
    try:
        leader, follower = await _one_leader([a, b])
        assert await _lease_holder(kube_api, namespace) == leader.identity
        auth = {"Authorization": f"Bearer {await mint_token(namespace, leader.sa)}"}
        async with aiohttp.ClientSession() as http:
            # Only the leader answers; the follower says so (for both endpoints).
            for method, path in (("POST", "assign-host-port"), ("GET", "assign-index")):
                async with http.request(method, f"{follower.url}/api/{path}?podName=x", headers=auth) as r:
                    assert r.status == 503 and await r.json() == NOT_LEADER
            # The follower still serves the diagnostics from its own caches.
            async with http.get(f"{follower.url}/api/allocation") as r:
                assert r.status == 200
            before = await _assign(http, leader, auth, [f"old-{i}" for i in range(100)])
            assert len(set(before.values())) == 100

            leader.kill()
            killed = time.monotonic()
            while True:
                async with http.post(f"{follower.url}/api/assign-host-port?podName=new-0", headers=auth) as r:
                    if r.status == 200:
                        break
                    assert r.status == 503 and await r.json() == NOT_LEADER
                # Takes over within the Lease time (plus a retry period and a busy machine's slack).
                assert time.monotonic() - killed < LEASE_S + 4, "no takeover within the lease time"
                await asyncio.sleep(0.1)
            assert await _lease_holder(kube_api, namespace) == follower.identity
            # Old pods keep their ports; new pods never get one of them.
            assert await _assign(http, follower, auth, list(before)) == before
            after = await _assign(http, follower, auth, [f"new-{i}" for i in range(100)])
            assert len(set(after.values())) == 100
            assert not set(after.values()) & set(before.values())
    finally:
        a.proc.stop()
        b.proc.stop()


async def test_only_the_leader_schedules(
    devcluster: Any, kube_api: Any, namespace: str, make_pool: Any
) -> None:
    pool = await make_pool(nodes=1, gpus_per_node=1)
    a, b = await _one_leader(list(await _start_two(devcluster, namespace)))
    try:
        await create_pod(kube_api, namespace, "p1", pool.name, tflops_request="10", vram_request="1Gi")
        p1 = await wait_bound(kube_api, namespace, "p1", timeout=30)
        # The follower rebuilt the allocation from the pod's annotations.
        async with httpx.AsyncClient(timeout=10) as http:
            deadline = time.monotonic() + 10
            while p1.metadata.uid not in (await http.get(f"{b.url}/api/allocation")).json()["allocation"]:
                assert time.monotonic() < deadline, "follower did not rebuild the allocation"
                await asyncio.sleep(0.2)
        # Freeze the leader: until its Lease expires nobody leads, and the follower binds nothing.
        assert a.proc.proc is not None
        os.kill(a.proc.proc.pid, signal.SIGSTOP)
        try:
            await create_pod(kube_api, namespace, "p2", pool.name, tflops_request="10", vram_request="1Gi")
            p2 = await wait_bound(kube_api, namespace, "p2", timeout=LEASE_S + 15)
            assert b.is_leader()
            # Only a leader binds: p2 was bound no earlier than the follower acquired the Lease
            # (PodScheduled's time has whole seconds, hence the 1 s slack). A follower that bound
            # at once would have done so about a Lease duration before acquiring it.
            lease = await client.CoordinationV1Api(kube_api).read_namespaced_lease(
                "gpuplane-controller-leader", namespace
            )
            assert lease.spec.holder_identity == b.identity
            [scheduled] = [c for c in p2.status.conditions or [] if c.type == "PodScheduled"]
            assert scheduled.last_transition_time >= lease.spec.acquire_time - timedelta(seconds=1), (
                f"a follower bound a pod: bound {scheduled.last_transition_time}, "
                f"leader since {lease.spec.acquire_time}"
            )
        finally:
            os.kill(a.proc.proc.pid, signal.SIGCONT)
        # The old leader wakes up past its renew deadline: it steps down instead of acting.
        deadline = time.monotonic() + 10
        while a.is_leader():
            assert time.monotonic() < deadline, "the frozen leader did not step down"
            await asyncio.sleep(0.1)
        assert b.is_leader()
    finally:
        a.proc.stop()
        b.proc.stop()
