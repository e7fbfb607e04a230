"""`GET /api/connection` against the devcluster: the status-code matrix (200/400/401/404/503/504)
with real pod-bound tokens, many waiters on one watch, and the reconciler that points a
TensorFusionConnection at a ready worker pod of its workload."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from controller_components_kit import component_controller
from kubernetes_asyncio import client

from gpuplane_controller.domain.connections import desired_status

GROUP, VERSION, PLURAL = "tensor-fusion.ai", "v1", "tensorfusionconnections"
WAIT = "3"  # GET /api/connection wait timeout (s) for these tests


def _pod(name: str, labels: dict[str, str] | None = None, port: int | None = None) -> dict[str, Any]:
    ann = {"devcluster.gpuplane.io/run-duration": "600s"}
    if port is not None:
        ann["tensor-fusion.ai/port-number"] = str(port)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": ann},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def _worker(name: str, workload: str = "wl", port: int = 42001) -> dict[str, Any]:
    labels = {"tensor-fusion.ai/workload": workload, "tensor-fusion.ai/component": "worker"}
    return _pod(name, labels, port)


async def _connection(kube_api: Any, ns: str, name: str, owner: client.V1Pod, workload: str = "wl") -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TensorFusionConnection",
        "metadata": {
            "name": name,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": owner.metadata.name, "uid": owner.metadata.uid}
            ],
        },
        "spec": {"workloadName": workload, "clientPod": owner.metadata.name},
    }
    await client.CustomObjectsApi(kube_api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)


async def _status(kube_api: Any, ns: str, name: str) -> dict[str, Any]:
    obj = await client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, name
    )
    return dict(obj.get("status") or {})


async def _wait_status(kube_api: Any, ns: str, name: str, want: dict[str, Any], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while (have := await _status(kube_api, ns, name)) != want:
        assert time.monotonic() < deadline, f"connection status {have}, wanted {want}"
        await asyncio.sleep(0.2)


async def _running_pod(kube_api: Any, ns: str, name: str, timeout: float = 30) -> client.V1Pod:
    core = client.CoreV1Api(kube_api)
    deadline = time.monotonic() + timeout
    while True:
        p = await core.read_namespaced_pod(name, ns)
        if p.status.phase == "Running" and p.status.pod_ip:
            return p
        assert time.monotonic() < deadline, f"pod {name} not Running"
        await asyncio.sleep(0.2)


async def _connection_watches(kube_api: Any) -> int:
    """Open WATCH requests on TensorFusionConnections, from the apiserver's own metrics."""
    resp = await kube_api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False)
    text = (await resp[0].read()).decode() if isinstance(resp, tuple) else (await resp.read()).decode()
    for line in text.splitlines():
        if (
            line.startswith("apiserver_longrunning_requests{")
            and 'resource="tensorfusionconnections"' in line
        ):
            if 'verb="WATCH"' in line:
                return int(float(line.rsplit(" ", 1)[1]))
    return 0


@pytest.fixture
async def pods(kube_api: Any, namespace: str) -> dict[str, client.V1Pod]:
    core = client.CoreV1Api(kube_api)
    for name in ("client", "other"):
        await core.create_namespaced_pod(namespace, _pod(name))
    return {n: await _running_pod(kube_api, namespace, n) for n in ("client", "other")}


async def test_connection_status_code_matrix(
    devcluster: Any, kube_api: Any, namespace: str, mint_token: Any, pods: dict[str, client.V1Pod]
) -> None:
    await _connection(kube_api, namespace, "conn", pods["client"])
    owner = {"Authorization": f"Bearer {await mint_token(namespace, pod=pods['client'])}"}
    stranger = {"Authorization": f"Bearer {await mint_token(namespace, pod=pods['other'])}"}
    no_pod = {"Authorization": f"Bearer {await mint_token(namespace)}"}
    baseline_watches = await _connection_watches(kube_api)
    env = {"GPUPLANE_CONTROLLER_CONNECTION_WAIT_TIMEOUT_S": WAIT}
    with component_controller(devcluster, namespace, env=env) as ctl:
        url = f"{ctl.url}/api/connection"
        q = {"name": "conn", "namespace": namespace}
        async with httpx.AsyncClient(timeout=30) as http:
            # 401: no token, a token the apiserver rejects, the token of another pod, a token of no pod.
            r = await http.get(url, params=q)
            assert r.status_code == 401 and r.json() == {"error": "missing bearer token"}
            r = await http.get(url, params=q, headers={"Authorization": "Bearer x.y.z"})
            assert r.status_code == 401 and r.json() == {"error": "invalid or expired token"}
            for headers in (stranger, no_pod):
                r = await http.get(url, params=q, headers=headers)
                assert r.status_code == 401 and "owns this connection" in r.json()["error"]
            # 404: no such connection (also in another namespace); 400: a parameter is missing.
            for params in (
                {"name": "nope", "namespace": namespace},
                {"name": "conn", "namespace": "default"},
            ):
                r = await http.get(url, params=params, headers=owner)
                assert r.status_code == 404 and "not found" in r.json()["error"]
            r = await http.get(url, params={"name": "conn"}, headers=owner)
            assert r.status_code == 400 and "namespace" in r.json()["error"]
            # 504: the workload has no worker within the wait timeout.
            t0 = time.monotonic()
            r = await http.get(url, params=q, headers=owner)
            assert r.status_code == 504 and "not ready within 3s" in r.json()["error"]
            assert time.monotonic() - t0 >= 2.9
            assert (await _status(kube_api, namespace, "conn"))["phase"] == "Pending"

            # 200: twenty clients wait; one watch serves them all; the worker comes up.
            waiters = [asyncio.ensure_future(http.get(url, params=q, headers=owner)) for _ in range(20)]
            await asyncio.sleep(0.5)
            assert await _connection_watches(kube_api) == baseline_watches + 1
            await client.CoreV1Api(kube_api).create_namespaced_pod(namespace, _worker("wl-worker-0"))
            answers = await asyncio.gather(*waiters)
            worker = await _running_pod(kube_api, namespace, "wl-worker-0")
            want = f"native+{worker.status.pod_ip}+42001"
            for r in answers:
                assert r.status_code == 200, r.text
                assert r.headers["content-type"].startswith("text/plain") and r.text == want
            assert await _status(kube_api, namespace, "conn") == {
                "phase": "Running",
                "connectionURL": want,
                "workerName": "wl-worker-0",
            }
            # Once Running, the answer is immediate; still only for the owner.
            r = await http.get(url, params=q, headers=owner)
            assert r.status_code == 200 and r.text == want
            r = await http.get(url, params=q, headers=stranger)
            assert r.status_code == 401


async def test_connection_follows_workers(
    devcluster: Any, kube_api: Any, namespace: str, pods: dict[str, client.V1Pod]
) -> None:
    core = client.CoreV1Api(kube_api)
    with component_controller(devcluster, namespace):
        for name in ("wl-a", "wl-b"):
            await core.create_namespaced_pod(namespace, _worker(name, port=42000 + ord(name[-1])))
        a, b = [await _running_pod(kube_api, namespace, n) for n in ("wl-a", "wl-b")]
        await _connection(kube_api, namespace, "c1", pods["client"])
        await _connection(kube_api, namespace, "c2", pods["other"])
        # Spread: the two connections land on different workers.
        deadline = time.monotonic() + 20
        while True:
            s1, s2 = await _status(kube_api, namespace, "c1"), await _status(kube_api, namespace, "c2")
            if s1.get("phase") == s2.get("phase") == "Running":
                break
            assert time.monotonic() < deadline, (s1, s2)
            await asyncio.sleep(0.2)
        assert {s1["workerName"], s2["workerName"]} == {"wl-a", "wl-b"}
        # The worker of c1 goes away: c1 moves to the other one.
        gone = s1["workerName"]
        stay = b if gone == "wl-a" else a
        await core.delete_namespaced_pod(gone, namespace, grace_period_seconds=0)
        await _wait_status(
            kube_api,
            namespace,
            "c1",
            {
                "phase": "Running",
                "workerName": stay.metadata.name,
                "connectionURL": f"native+{stay.status.pod_ip}+{42000 + ord(stay.metadata.name[-1])}",
            },
        )
        # No worker left: back to Pending, without a URL.
        await core.delete_namespaced_pod(stay.metadata.name, namespace, grace_period_seconds=0)
        await _wait_status(kube_api, namespace, "c1", {"phase": "Pending"})


@pytest.mark.slow
async def test_connection_503_while_the_watch_is_broken(
    devcluster: Any, kube_api: Any, namespace: str, mint_token: Any, pods: dict[str, client.V1Pod]
) -> None:
    await _connection(kube_api, namespace, "conn", pods["client"])
    owner = {"Authorization": f"Bearer {await mint_token(namespace, pod=pods['client'])}"}
    env = {"GPUPLANE_CONTROLLER_CONNECTION_WAIT_TIMEOUT_S": "30"}
    with component_controller(devcluster, namespace, env=env) as ctl:
        url, q = f"{ctl.url}/api/connection", {"name": "conn", "namespace": namespace}
        async with httpx.AsyncClient(timeout=90) as http:
            waiter = asyncio.ensure_future(http.get(url, params=q, headers=owner))
            await asyncio.sleep(1.0)  # reviewed (and cached) and waiting on the watch
            assert not waiter.done()
            await asyncio.to_thread(devcluster.stop_component, "kube-apiserver")
            try:
                r = await asyncio.wait_for(waiter, 20)
                assert r.status_code == 503 and "watch" in r.json()["error"]
                r = await http.get(url, params=q, headers=owner)
                assert r.status_code == 503 and "watch" in r.json()["error"]
                # The Lease cannot be renewed: the leader steps down after its renew deadline.
                deadline = time.monotonic() + 10
                while await asyncio.to_thread(ctl.is_leader):
                    assert time.monotonic() < deadline, "leader kept leading without its Lease"
                    await asyncio.sleep(0.2)
            finally:
                await asyncio.to_thread(devcluster.restart_component, "kube-apiserver")
            await asyncio.to_thread(ctl.wait_leader, 30)  # and takes the Lease again
            # Everything resumes: the worker that comes up now is handed out.
            await client.CoreV1Api(kube_api).create_namespaced_pod(namespace, _worker("wl-worker-0"))
            deadline = time.monotonic() + 60
            while (r := await http.get(url, params=q, headers=owner)).status_code == 503:
                assert time.monotonic() < deadline, "connection watch never recovered"
                await asyncio.sleep(0.5)
            assert r.status_code == 200 and r.text.startswith("native+"), r.text


def test_desired_status_rules() -> None:
    def worker(
        name: str, ready: bool = True, ip: str = "10.0.0.1", port: str | None = "42001"
    ) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "annotations": {"tensor-fusion.ai/port-number": port} if port else {}},
            "spec": {"containers": [{"name": "m"}]},
            "status": {
                "phase": "Running",
                "podIP": ip,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    conn: dict[str, Any] = {"status": {}}
    assert desired_status(conn, [], {}) == {"phase": "Pending", "connectionURL": None, "workerName": None}
    assert desired_status(conn, [worker("a", ready=False)], {})["phase"] == "Starting"
    assert desired_status(conn, [worker("a", port=None)], {})["phase"] == "Starting"  # no port, no URL
    two = [worker("b", ip="10.0.0.2"), worker("a")]
    assert desired_status(conn, two, {"a": 3})["workerName"] == "b"  # fewest connections
    assert desired_status(conn, two, {})["connectionURL"] == "native+10.0.0.1+42001"  # tie: by name
    sticky = {"status": {"workerName": "b"}}
    assert desired_status(sticky, two, {"b": 9})["workerName"] == "b"  # stays while b is usable
