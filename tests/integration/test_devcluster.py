"""The devcluster is a real control plane: workloads behave as on a cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

pytestmark = pytest.mark.cluster

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


async def eventually(
    check: Callable[[], Awaitable[Any]], timeout: float = 60, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.25)
    raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r})")


def pod_template(app: str, *, gpus: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [container], "tolerations": [GPU_TOLERATION]},
    }


async def test_apiserver_is_kubernetes_1_34(kube_api: Any) -> None:
    version = await client.VersionApi(kube_api).get_code()
    assert version.git_version.startswith("v1.34."), version.git_version
    assert version.minor == "34"


async def test_gpu_nodes_are_ready_with_gpu_capacity(kube_api: Any) -> None:
    nodes = await client.CoreV1Api(kube_api).list_node(label_selector="nvidia.com/gpu.present=true")
    assert len(nodes.items) >= 2
    for node in nodes.items:
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.metadata.labels["tensor-fusion.ai/gpu-model"] == "H100"
        assert any(t.key == "nvidia.com/gpu" and t.effect == "NoSchedule" for t in node.spec.taints)
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


async def test_deployment_pods_run_on_gpu_nodes(kube_api: Any, namespace: str) -> None:
    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    body = {
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": pod_template("web", gpus=1),
        },
    }
    await apps.create_namespaced_deployment(namespace, body=body)

    async def running() -> list[Any]:
        pods = (await core.list_namespaced_pod(namespace, label_selector="app=web")).items
        ok = [p for p in pods if p.status.phase == "Running" and p.spec.node_name]
        return ok if len(ok) == 2 else []

    pods = await eventually(running, what="2 running pods")
    nodes = {n.metadata.name: n for n in (await core.list_node()).items}
    for p in pods:
        assert nodes[p.spec.node_name].metadata.labels.get("type") == "kwok"
        assert p.status.pod_ip
    dep = await eventually(
        lambda: _ready_deployment(apps, namespace, "web", 2), what="deployment availableReplicas=2"
    )
    assert dep.status.available_replicas == 2


async def _ready_deployment(apps: client.AppsV1Api, ns: str, name: str, n: int) -> Any:
    d = await apps.read_namespaced_deployment(name, ns)
    return d if (d.status.available_replicas or 0) == n else None


async def test_scheduler_respects_gpu_capacity(kube_api: Any, namespace: str) -> None:
    """A pod asking for more GPUs than any node has stays Pending (real kube-scheduler)."""
    core = client.CoreV1Api(kube_api)
    spec = pod_template("big", gpus=9)["spec"]
    await core.create_namespaced_pod(namespace, body={"metadata": {"name": "big"}, "spec": spec})

    async def unschedulable() -> bool:
        p = await core.read_namespaced_pod("big", namespace)
        return any(
            c.type == "PodScheduled" and c.reason == "Unschedulable" for c in (p.status.conditions or [])
        )

    await eventually(unschedulable, what="PodScheduled=False/Unschedulable")
    pod = await core.read_namespaced_pod("big", namespace)
    assert pod.spec.node_name is None


async def test_job_completes(kube_api: Any, namespace: str) -> None:
    batch = client.BatchV1Api(kube_api)
    tmpl = pod_template("train")
    tmpl["spec"]["restartPolicy"] = "Never"
    await batch.create_namespaced_job(
        namespace, body={"metadata": {"name": "train"}, "spec": {"backoffLimit": 0, "template": tmpl}}
    )

    async def complete() -> Any:
        job = await batch.read_namespaced_job("train", namespace)
        conds = {c.type: c.status for c in (job.status.conditions or [])}
        return job if conds.get("Complete") == "True" else None

    job = await eventually(complete, what="Job Complete")
    assert job.status.succeeded == 1


async def test_statefulset_gets_its_pod(kube_api: Any, namespace: str) -> None:
    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    body = {
        "metadata": {"name": "nb"},
        "spec": {
            "replicas": 1,
            "serviceName": "nb",
            "selector": {"matchLabels": {"app": "nb"}},
            "template": pod_template("nb"),
        },
    }
    await apps.create_namespaced_stateful_set(namespace, body=body)

    async def pod_running() -> Any:
        try:
            p = await core.read_namespaced_pod("nb-0", namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return p if p.status.phase == "Running" else None

    await eventually(pod_running, what="pod nb-0 Running")


async def test_pod_logs_are_served(kube_api: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_pod(
        namespace, body={"metadata": {"name": "logger"}, "spec": pod_template("l")["spec"]}
    )

    async def running() -> bool:
        return (await core.read_namespaced_pod("logger", namespace)).status.phase == "Running"

    await eventually(running, what="logger Running")
    logs = await core.read_namespaced_pod_log("logger", namespace, container="main")
    assert "devcluster: container started" in logs


async def test_namespace_deletion_finishes(kube_api: Any) -> None:
    core = client.CoreV1Api(kube_api)
    name = f"gone-{int(time.time() * 1000) % 10**8}"
    await core.create_namespace(body={"metadata": {"name": name}})
    await core.create_namespaced_config_map(name, body={"metadata": {"name": "cm"}, "data": {"a": "b"}})
    await core.create_namespaced_pod(
        name, body={"metadata": {"name": "p"}, "spec": pod_template("p")["spec"]}
    )
    await core.delete_namespace(name)

    async def gone() -> bool:
        try:
            await core.read_namespace(name)
        except ApiException as e:
            return e.status == 404
        return False

    await eventually(gone, timeout=90, what="namespace fully deleted")


async def test_make_gpu_nodes_creates_ready_nodes_of_the_asked_shape(
    kube_api: Any, make_gpu_nodes: Any
) -> None:
    names = await make_gpu_nodes(2, gpus=4, model="A100", labels={"runwhere.ai/pool": "p1"})
    core = client.CoreV1Api(kube_api)
    for name in names:
        node = await core.read_node(name)
        assert node.status.allocatable["nvidia.com/gpu"] == "4"
        assert node.metadata.labels["runwhere.ai/pool"] == "p1"
        assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"


def test_cli_env_and_status_describe_the_running_cluster(devcluster: Any) -> None:
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "devcluster.cli", "--name", devcluster.name, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    env = cli("env")
    assert env.returncode == 0
    assert env.stdout.strip() == f"KUBECONFIG={devcluster.kubeconfig}"
    status = cli("status")
    assert status.returncode == 0
    assert all(f"{c}" in status.stdout for c in ("etcd", "kube-apiserver", "kwok"))
    assert "stopped" not in status.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "devcluster.cli", "--name", "never-started", "env"],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1
    assert "not up" in missing.stderr
