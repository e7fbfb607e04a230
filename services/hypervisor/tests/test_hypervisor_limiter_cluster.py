"""Limiter API against the devcluster: TokenReview with real pod-bound tokens, and process
registration of a real process in its own PID namespace."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from hypervisor_pidns import pod_container
from hypervisor_testkit import GIB, agent_of, allocation, load, running
from kubernetes_asyncio import client

from gpuplane_hypervisor.gpu.simulated import SimulatedBackend
from gpuplane_hypervisor.settings import Settings

SettingsFactory = Callable[..., Settings]


async def make_pod(kube_api: Any, namespace: str, name: str) -> Any:
    core = client.CoreV1Api(kube_api)
    body = {
        "metadata": {"name": name},
        "spec": {
            "nodeName": "gpu-node-0",
            "containers": [{"name": "main", "image": "busybox"}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    return await core.create_namespaced_pod(namespace, body)


@pytest.fixture
async def two_pods(kube_api: Any, namespace: str, mint_token: Any) -> dict[str, Any]:
    await mint_token(namespace)  # creates the ServiceAccount the pods run as
    pods = {n: await make_pod(kube_api, namespace, n) for n in ("pod-a", "pod-b", "pod-c")}
    tokens = {n: await mint_token(namespace, pod=p) for n, p in pods.items()}
    return {"pods": pods, "tokens": tokens, "unbound": await mint_token(namespace)}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_pod_endpoint_answers_only_for_the_reviewed_pod(
    devcluster: Any, namespace: str, two_pods: dict[str, Any], settings_factory: SettingsFactory
) -> None:
    pods, tokens = two_pods["pods"], two_pods["tokens"]
    settings = settings_factory(kubeconfig=str(devcluster.kubeconfig))
    async with running(settings) as (app, http):
        agent = agent_of(app)
        uuids = list(agent.devices)
        a = pods["pod-a"].metadata
        b = pods["pod-b"].metadata
        load(
            agent,
            allocation(
                a.uid, uuids[:2], namespace=namespace, pod_name=a.name, tflops_limit=300.0, qos="high"
            ),
            allocation(b.uid, uuids[2:3], namespace=namespace, pod_name=b.name, vram_limit=4 * GIB),
        )
        ra = await http.get("/api/v1/pod", params={"container_name": "main"}, headers=bearer(tokens["pod-a"]))
        assert ra.status_code == 200, ra.text
        assert ra.json() == {
            "success": True,
            "data": {
                "pod_name": "pod-a",
                "namespace": namespace,
                "gpu_uuids": uuids[:2],
                "tflops_limit": 300.0,
                "vram_limit": 16 * GIB,
                "qos_level": "high",
                "compute_shard": True,
                "isolation": "soft",
            },
            "message": "ok",
        }
        rb = await http.get("/api/v1/pod", params={"container_name": "main"}, headers=bearer(tokens["pod-b"]))
        assert rb.json()["data"]["pod_name"] == "pod-b" and rb.json()["data"]["gpu_uuids"] == uuids[2:3]
        assert rb.json()["data"]["vram_limit"] == 4 * GIB
        # A pod without an allocation here, a token not bound to a pod, a forged token, no token.
        rc = await http.get("/api/v1/pod", params={"container_name": "main"}, headers=bearer(tokens["pod-c"]))
        assert rc.status_code == 404 and "pod-c" in rc.json()["error"]
        ru = await http.get(
            "/api/v1/pod", params={"container_name": "main"}, headers=bearer(two_pods["unbound"])
        )
        assert ru.status_code == 401 and ru.json() == {"error": "token is not bound to a pod"}
        forged = tokens["pod-a"][:-4] + "AAAA"
        rf = await http.get("/api/v1/pod", params={"container_name": "main"}, headers=bearer(forged))
        assert rf.status_code == 401 and set(rf.json()) == {"error"}
        assert (await http.get("/api/v1/pod", params={"container_name": "main"})).status_code == 401
        rp = await http.post(
            "/api/v1/process", params={"container_name": "main", "container_pid": 1}, headers=bearer(forged)
        )
        assert rp.status_code == 401


async def test_process_registration_maps_a_pid_namespace_child_and_survives_restart(
    devcluster: Any, namespace: str, two_pods: dict[str, Any], settings_factory: SettingsFactory
) -> None:
    pods, tokens = two_pods["pods"], two_pods["tokens"]
    a, b = pods["pod-a"].metadata, pods["pod-b"].metadata
    settings = settings_factory(kubeconfig=str(devcluster.kubeconfig))
    with pod_container(a.uid) as ctr:
        async with running(settings) as (app, http):
            agent = agent_of(app)
            uuids = list(agent.devices)
            load(
                agent,
                allocation(a.uid, uuids[:1], namespace=namespace, pod_name=a.name),
                allocation(b.uid, uuids[1:2], namespace=namespace, pod_name=b.name),
            )
            params = {"container_name": "main", "container_pid": ctr.worker_container_pid}
            # Pod B's token cannot claim pod A's process: it is not in B's cgroup.
            wrong = await http.post("/api/v1/process", params=params, headers=bearer(tokens["pod-b"]))
            assert wrong.status_code == 404 and "cgroup" in wrong.json()["error"]
            resp = await http.post("/api/v1/process", params=params, headers=bearer(tokens["pod-a"]))
            assert resp.status_code == 200, resp.text
            assert resp.json()["data"] == {
                "host_pid": ctr.worker_host_pid,
                "container_pid": 2,
                "container_name": "main",
                "pod_name": "pod-a",
                "namespace": namespace,
            }
            unknown = await http.post(
                "/api/v1/process",
                params={"container_name": "main", "container_pid": 4_000_000},
                headers=bearer(tokens["pod-a"]),
            )
            assert unknown.status_code == 404 and "container PID 4000000" in unknown.json()["error"]
            # The process's device usage shows under the worker.
            backend = agent.backend
            assert isinstance(backend, SimulatedBackend)
            backend.set_process(uuids[0], ctr.worker_host_pid, 2 * GIB, 33.0)
            await asyncio.sleep(0.2)
            worker = (await http.get(f"/api/v1/workers/{a.uid}")).json()["data"]
            assert worker["Status"] == "Running"
            listed = {w["WorkerUID"]: w["Status"] for w in (await http.get("/api/v1/workers")).json()["data"]}
            assert listed == {a.uid: "Running", b.uid: "Allocated"}
            assert worker["Usage"] == {
                uuids[0]: {str(ctr.worker_host_pid): {"memoryBytes": 2 * GIB, "computePercent": 33.0}}
            }
        # A restart keeps the registration (state file), as long as the process lives.
        async with running(settings) as (app, http):
            worker = (await http.get(f"/api/v1/workers/{a.uid}")).json()["data"]
            assert worker["Processes"] == [
                {"HostPID": ctr.worker_host_pid, "ContainerPID": 2, "ContainerName": "main"}
            ]
    # The container was killed: the next start drops the registration of the exited process.
    async with running(settings) as (app, http):
        worker = (await http.get(f"/api/v1/workers/{a.uid}")).json()["data"]
        assert worker["Processes"] == [] and worker["Status"] == "Allocated"
