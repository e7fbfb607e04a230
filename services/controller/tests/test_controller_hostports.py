"""Host ports and device indices: the pure allocators, and `POST /api/assign-host-port` /
`GET /api/assign-index` of a real controller (auth, idempotency, 1,000 concurrent
requests without a duplicate, release when the pod goes away)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import aiohttp
import httpx
import pytest
from controller_components_kit import component_controller
from kubernetes_asyncio import client

from gpuplane_controller.domain.hostports import HostPortAllocator, parse_port_range
from gpuplane_controller.domain.indices import IndexAllocator
from gpuplane_core.errors import InsufficientCapacity, InvalidSpec

# ---- pure allocators --------------------------------------------------------------------------------


def test_port_range_parsing_names_the_setting() -> None:
    assert parse_port_range("42000-62000") == (42000, 62000)
    for bad in ("", "42000", "62000-42000", "0-10", "1-70000", "a-b"):
        with pytest.raises(InvalidSpec) as e:
            parse_port_range(bad)
        assert e.value.field == "cluster_host_port_range"


def test_ports_are_idempotent_unique_and_reused_last() -> None:
    a = HostPortAllocator(100, 102)
    assert [a.assign("p1"), a.assign("p2"), a.assign("p1")] == [100, 101, 100]
    assert a.release("p1") == 100
    # Round robin: the released port is handed out only after the never-used one.
    assert a.assign("p3") == 102
    assert a.assign("p4") == 100
    with pytest.raises(InsufficientCapacity):
        a.assign("p5")
    assert a.assign("p2") == 101  # holders still get their port when the range is full


def test_port_restore_rejects_conflicts_and_out_of_range() -> None:
    a = HostPortAllocator(100, 109)
    assert a.restore("p1", 105)
    assert not a.restore("p2", 105)  # held by p1
    assert not a.restore("p1", 106)  # p1 already holds 105
    assert not a.restore("p3", 99)
    assert a.assign("p4") == 106  # continues after the highest restored port


def test_indices_cycle_and_skip_held_ones() -> None:
    ix = IndexAllocator(size=4)
    assert [ix.assign(f"p{i}") for i in range(4)] == [1, 2, 3, 4]
    assert ix.assign("p0") == 1
    ix.release("p1")
    assert ix.assign("p9") == 2  # the only free one
    # All held: cycling goes on, sharing the least shared index.
    shared = [ix.assign(f"q{i}") for i in range(8)]
    assert Counter(ix.by_pod.values()) == {1: 3, 2: 3, 3: 3, 4: 3}
    assert sorted(shared) == [1, 1, 2, 2, 3, 3, 4, 4]


def test_indices_restore() -> None:
    ix = IndexAllocator(size=128)
    assert ix.restore("a", 7) and ix.restore("a", 7) and not ix.restore("a", 8)
    assert not ix.restore("b", 0) and not ix.restore("b", 129)
    assert ix.assign("c") == 8


# ---- against the devcluster ---------------------------------------------------------------------------


async def _bad_callers(http: httpx.AsyncClient, url: str, other_sa_token: str) -> None:
    for method, path in (("POST", "/api/assign-host-port"), ("GET", "/api/assign-index")):
        r = await http.request(method, f"{url}{path}", params={"podName": "p"})
        assert r.status_code == 401 and "error" in r.json()
        r = await http.request(
            method, f"{url}{path}", params={"podName": "p"}, headers={"Authorization": "Bearer not-a-token"}
        )
        assert r.status_code == 401 and r.json() == {"error": "invalid or expired token"}
        r = await http.request(
            method,
            f"{url}{path}",
            params={"podName": "p"},
            headers={"Authorization": f"Bearer {other_sa_token}"},
        )
        assert r.status_code == 401 and "ServiceAccount" in r.json()["error"]


async def test_assign_auth_then_thousand_concurrent_requests_never_duplicate(
    devcluster: Any, namespace: str, mint_token: Any
) -> None:
    with component_controller(devcluster, namespace) as ctl:
        token = await mint_token(namespace, ctl.sa)
        auth = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(timeout=10) as h:
            # Only the controller's own ServiceAccount may ask: 401 for any other caller.
            await _bad_callers(h, ctl.url, await mint_token(namespace, "someone-else"))
            r = await h.post(f"{ctl.url}/api/assign-host-port", headers=auth)
            assert r.status_code == 400 and "podName" in r.json()["error"]
            r = await h.post(f"{ctl.url}/api/assign-host-port", params={"podName": "Bad_Name"}, headers=auth)
            assert r.status_code == 400 and "podName" in r.json()["error"]
            r = await h.get(f"{ctl.url}/api/assign-host-port", params={"podName": "p"}, headers=auth)
            assert r.status_code == 405
        # aiohttp, not httpx: httpx's pool is slow with hundreds of concurrent requests.
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as http:

            async def ask(kind: str, pod: str) -> tuple[str, str, int]:
                method, path = ("POST", "assign-host-port") if kind == "port" else ("GET", "assign-index")
                async with http.request(
                    method, f"{ctl.url}/api/{path}", params={"podName": pod}, headers=auth
                ) as r:
                    text = await r.text()
                    assert r.status == 200, text
                    assert r.headers["content-type"].startswith("text/plain")
                return kind, pod, int(text)

            # 1,000 concurrent requests: 700 for ports from 600 pods (100 ask twice) and 300 for
            # indices from 128 pods (each asks 2 or 3 times), interleaved.
            port_pods = [f"w-{i}" for i in range(600)]
            idx_pods = [f"i-{i}" for i in range(128)]
            asks = [("port", p) for p in port_pods + port_pods[:100]]
            asks += [("index", p) for p in idx_pods * 2 + idx_pods[:44]]
            asks.sort(key=lambda a: hash(a[1]))
            assert len(asks) == 1000
            got = await asyncio.gather(*(ask(k, p) for k, p in asks))
            answers: dict[tuple[str, str], set[int]] = {}
            for kind, pod, value in got:
                answers.setdefault((kind, pod), set()).add(value)
            assert all(len(v) == 1 for v in answers.values()), "a pod got two different answers"
            port_of = {pod: v.pop() for (kind, pod), v in answers.items() if kind == "port"}
            index_of = {pod: v.pop() for (kind, pod), v in answers.items() if kind == "index"}
            assert len(set(port_of.values())) == 600, "duplicate host port"
            assert all(42000 <= p <= 62000 for p in port_of.values())
            assert sorted(index_of.values()) == list(range(1, 129)), "duplicate device index"
            # Beyond 128 live holders indices cycle: the 129th pod gets 1 again, the next 2.
            assert (await ask("index", "i-extra-0"))[2] == 1
            assert (await ask("index", "i-extra-1"))[2] == 2

        # Every assignment is in the ledger (so a new leader knows it) before it is answered.
        cm = await _ledger(devcluster, namespace)
        assert len([k for k in cm if k.startswith("port.")]) == 600
        assert cm["port.w-7"].split()[0] == str(port_of["w-7"])
        assert cm["index.i-5"].split()[0] == str(index_of["i-5"])


async def _ledger(devcluster: Any, namespace: str) -> dict[str, str]:
    from devcluster.k8s_ops import api_client

    api = await api_client(devcluster.kubeconfig)
    try:
        cm = await client.CoreV1Api(api).read_namespaced_config_map(
            "gpuplane-controller-assignments", namespace
        )
        return dict(cm.data or {})
    finally:
        await api.close()


def _plain_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"devcluster.gpuplane.io/run-duration": "600s"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


async def test_port_released_when_pod_goes_away(
    devcluster: Any, kube_api: Any, namespace: str, mint_token: Any
) -> None:
    core = client.CoreV1Api(kube_api)
    for name in ("holder-a", "holder-b"):
        await core.create_namespaced_pod(namespace, _plain_pod(name))
    env = {"GPUPLANE_CONTROLLER_CLUSTER_HOST_PORT_RANGE": "42000-42001"}
    with component_controller(devcluster, namespace, env=env) as ctl:
        auth = {"Authorization": f"Bearer {await mint_token(namespace, ctl.sa)}"}
        async with httpx.AsyncClient(timeout=10) as http:

            async def ask(pod: str) -> httpx.Response:
                return await http.post(
                    f"{ctl.url}/api/assign-host-port", params={"podName": pod}, headers=auth
                )

            a, b = (await ask("holder-a")).text, (await ask("holder-b")).text
            assert {a, b} == {"42000", "42001"}
            full = await ask("newcomer")
            assert full.status_code == 422 and "no free host port" in full.json()["error"]
            await core.delete_namespaced_pod("holder-a", namespace, grace_period_seconds=0)
            deadline = time.monotonic() + 20
            while (r := await ask("newcomer")).status_code != 200:
                assert time.monotonic() < deadline, f"port of the deleted pod never freed: {r.text}"
                await asyncio.sleep(0.2)
            assert r.text == a
            assert (await ask("holder-b")).text == b  # the other pod keeps its port
            assert "port.holder-a" not in await _ledger(devcluster, namespace)


async def test_assignment_of_a_pod_that_never_appears_expires(
    devcluster: Any, kube_api: Any, namespace: str, mint_token: Any
) -> None:
    await client.CoreV1Api(kube_api).create_namespaced_pod(namespace, _plain_pod("real"))
    env = {
        "GPUPLANE_CONTROLLER_CLUSTER_HOST_PORT_RANGE": "42000-42001",
        "GPUPLANE_CONTROLLER_ASSIGNMENT_GRACE_SECONDS": "2",
    }
    with component_controller(devcluster, namespace, env=env) as ctl:
        auth = {"Authorization": f"Bearer {await mint_token(namespace, ctl.sa)}"}
        async with httpx.AsyncClient(timeout=10) as http:

            async def ask(pod: str) -> httpx.Response:
                return await http.post(
                    f"{ctl.url}/api/assign-host-port", params={"podName": pod}, headers=auth
                )

            ghost, real = (await ask("ghost")).text, (await ask("real")).text
            started = time.monotonic()
            deadline = started + 20
            while (r := await ask("late")).status_code != 200:
                assert r.status_code == 422
                assert time.monotonic() < deadline, "the never-created pod's port was never released"
                await asyncio.sleep(0.3)
            assert time.monotonic() - started >= 1.5  # not before the grace period
            assert r.text == ghost
            assert (await ask("real")).text == real  # a live pod keeps its port past the grace period
