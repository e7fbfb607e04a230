"""`helm install` of charts/gpuplane into the devcluster: every pod becomes Running on the
kwok nodes, the hypervisor DaemonSet lands only on GPU nodes, `helm uninstall` cleans up."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import pytest
from chart_kit import CHART, Helm
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

GPU_LABEL = "nvidia.com/gpu.present"


async def _wait(what: str, check: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        ok, last = await check()
        if ok:
            return last
        await asyncio.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last seen: {last}")


@pytest.fixture
async def lens_volume(kube_api: Any) -> Any:
    """A PersistentVolume for Lens's claim: the devcluster has no dynamic provisioner, so the
    claim binds to this one through the real PV controller, as with static provisioning."""
    core = client.CoreV1Api(kube_api)
    name = f"lens-pv-{secrets.token_hex(3)}"
    await core.create_persistent_volume(
        {
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "5Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "hostPath": {"path": f"/tmp/{name}"},
            },
        }
    )
    yield name
    try:
        await core.delete_persistent_volume(name)
    except ApiException as e:
        if e.status != 404:
            raise


async def test_install_runs_everything_and_uninstall_cleans_up(
    helm: Helm, devcluster: Any, kube_api: Any, namespace: str, lens_volume: str
) -> None:
    core = client.CoreV1Api(kube_api)
    rbac = client.RbacAuthorizationV1Api(kube_api)
    release = f"gp{secrets.token_hex(3)}"
    r = helm.run(
        "install", release, str(CHART), "--namespace", namespace,
        "--set", "hypervisor.backend=simulated", "--set", "hypervisor.simulatedDevices=8xH100-80GB",
        "--wait", "--timeout", "120s",
        kubeconfig=devcluster.kubeconfig, timeout=180,
    )  # fmt: skip
    assert r.rc == 0, r.stderr
    assert "gpuplane" in r.stdout  # NOTES rendered

    nodes = (await core.list_node()).items
    gpu_nodes = {n.metadata.name for n in nodes if (n.metadata.labels or {}).get(GPU_LABEL) == "true"}
    assert {"gpu-node-0", "gpu-node-1"} <= gpu_nodes and "cpu-node-0" not in gpu_nodes

    async def all_running() -> tuple[bool, Any]:
        pods = (await core.list_namespaced_pod(namespace)).items
        phases = {p.metadata.name: (p.status.phase, p.spec.node_name) for p in pods}
        by_comp: dict[str, int] = {}
        for p in pods:
            comp = p.metadata.labels.get("app.kubernetes.io/component", "?")
            by_comp[comp] = by_comp.get(comp, 0) + 1
        want = {"controller": 2, "hypervisor": len(gpu_nodes), "gpuctl": 1, "lens": 1}
        ok = by_comp == want and all(ph == "Running" for ph, _ in phases.values())
        return ok, phases

    phases = await _wait("every pod Running", all_running)
    ds_nodes = {node for name, (_, node) in phases.items() if "-hypervisor-" in name}
    assert ds_nodes == gpu_nodes  # one hypervisor per GPU node, none on cpu-node-0

    ds = (await client.AppsV1Api(kube_api).list_namespaced_daemon_set(namespace)).items[0]
    assert ds.status.desired_number_scheduled == len(gpu_nodes) == ds.status.number_ready
    pvc = (await core.list_namespaced_persistent_volume_claim(namespace)).items[0]
    assert pvc.status.phase == "Bound" and pvc.spec.volume_name == lens_volume

    # helm's own view agrees
    st = helm.run("status", release, "--namespace", namespace, kubeconfig=devcluster.kubeconfig)
    assert st.rc == 0 and "STATUS: deployed" in st.stdout

    r = helm.run(
        "uninstall", release, "--namespace", namespace, "--wait", "--timeout", "120s",
        kubeconfig=devcluster.kubeconfig, timeout=180,
    )  # fmt: skip
    assert r.rc == 0, r.stderr

    async def gone() -> tuple[bool, Any]:
        pods = [p.metadata.name for p in (await core.list_namespaced_pod(namespace)).items]
        roles = [
            c.metadata.name
            for c in (await rbac.list_cluster_role()).items
            if c.metadata.name.startswith(f"{release}-")
        ]
        return not pods and not roles, (pods, roles)

    await _wait("the release to be gone", gone)
    assert not (await core.list_namespaced_service(namespace)).items
    assert not (
        await core.list_namespaced_service_account(
            namespace, label_selector="app.kubernetes.io/part-of=gpuplane"
        )
    ).items
    # Lens's data (SQLite and its key) is kept on purpose: helm.sh/resource-policy=keep
    kept = (await core.list_namespaced_persistent_volume_claim(namespace)).items
    assert [p.metadata.annotations.get("helm.sh/resource-policy") for p in kept] == ["keep"]
    await core.delete_namespaced_persistent_volume_claim(kept[0].metadata.name, namespace)
