"""Fault: the leader controller is SIGKILLed while host ports and device indices are being
handed out (`POST /api/assign-host-port`, `GET /api/assign-index`), requests in flight.

What must hold: the follower takes over; every answer a caller received, from the old leader or
the new one, stays that pod's (asking again returns the same port and index), and no port or index
is ever given to two pods, before, during or after the failover.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from controller_components_kit import Ctl, start_controller

from devcluster.cluster import DevCluster

PODS_DURING, PODS_AFTER = 70, 50  # 120 <= 128 indices: all must be distinct


async def _one_leader(ctls: list[Ctl], timeout: float = 30) -> Ctl:
    deadline = time.monotonic() + timeout
    while True:
        leaders = [c for c in ctls if c.proc.proc is not None and await asyncio.to_thread(c.is_leader)]
        assert len(leaders) < 2, "two leaders at once"
        if leaders:
            return leaders[0]
        assert time.monotonic() < deadline, "no leader elected"
        await asyncio.sleep(0.1)


async def _ask(
    http: aiohttp.ClientSession, ctls: list[Ctl], auth: dict[str, str], kind: str, pod: str
) -> int:
    """As a replica does: ask any controller, retry 503 (not the leader) and dead connections."""
    method, path = ("POST", "assign-host-port") if kind == "port" else ("GET", "assign-index")
    deadline = time.monotonic() + 60
    while True:
        for c in ctls:
            try:
                async with http.request(
                    method, f"{c.url}/api/{path}", params={"podName": pod}, headers=auth
                ) as r:
                    if r.status == 200:
                        return int(await r.text())
                    assert r.status == 503, f"{r.status} {await r.text()}"
            except (aiohttp.ClientError, OSError):
                pass  # the killed leader
        assert time.monotonic() < deadline, f"no controller assigned a {kind} to {pod}"
        await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_leader_killed_mid_assignment_follower_takes_over_without_collisions(
    devcluster: DevCluster, namespace: str, mint_token: Any
) -> None:
    ctls = [
        start_controller(devcluster, namespace, "ctl-a"),
        start_controller(devcluster, namespace, "ctl-b"),
    ]
    try:
        leader = await _one_leader(ctls)
        auth = {"Authorization": f"Bearer {await mint_token(namespace, leader.sa)}"}
        got: dict[tuple[str, str], int] = {}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:

            async def one(kind: str, pod: str) -> None:
                got[(kind, pod)] = await _ask(http, ctls, auth, kind, pod)

            during = [one(k, f"during-{i}") for i in range(PODS_DURING) for k in ("port", "index")]
            stream = asyncio.ensure_future(asyncio.gather(*during))
            while len(got) < PODS_DURING // 2:  # noqa: ASYNC110  (kill with some answered, most in flight)
                await asyncio.sleep(0.01)
            leader.kill()
            answered_by_old = dict(got)
            await stream
            new_leader = await _one_leader(ctls)
            assert new_leader is not leader
            await asyncio.gather(
                *(one(k, f"after-{i}") for i in range(PODS_AFTER) for k in ("port", "index"))
            )

            for kind in ("port", "index"):
                values = {pod: v for (k, pod), v in got.items() if k == kind}
                assert len(values) == PODS_DURING + PODS_AFTER
                dup = {v for v in values.values() if list(values.values()).count(v) > 1}
                assert not dup, f"{kind}s given to two pods: {sorted(dup)}"
            # Every answer, the dying leader's included, is what the new leader says too.
            again = {key: await _ask(http, [new_leader], auth, *key) for key in got}
            assert again == got
            assert answered_by_old.items() <= again.items()
    finally:
        for c in ctls:
            c.proc.stop()
