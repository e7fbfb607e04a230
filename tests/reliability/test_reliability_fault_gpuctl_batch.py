"""Fault: the apiserver rejects requests in the middle of a gpuctl batch.

Real rejections, no mocks: a ValidatingAdmissionPolicy refuses Services and Jobs whose name ends
in `-veto`, and a ResourceQuota allows two Deployments. What must hold: the per-item results say
exactly which items were created and why each other one failed; an item whose second object was
refused (its Deployment created, its Service vetoed) is cleaned up, so nothing of a failed item
is left; the items after a failure are still created.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fault_kit import wait_for
from gpuctl_helpers import job_yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from devcluster.cluster import DevCluster
from devcluster.services import ServiceProcess

ADM = "admissionregistration.k8s.io"


@pytest.fixture
async def veto_policy(kube_api: Any, namespace: str) -> AsyncIterator[str]:
    """A ValidatingAdmissionPolicy bound to the test namespace only."""
    custom = client.CustomObjectsApi(kube_api)
    name = f"veto-{namespace}"[:63]
    policy = {
        "apiVersion": f"{ADM}/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["services"],
                    },
                    {
                        "apiGroups": ["batch"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["jobs"],
                    },
                ]
            },
            "validations": [
                {"expression": "!object.metadata.name.endsWith('-veto')", "message": "vetoed by test policy"}
            ],
        },
    }
    binding = {
        "apiVersion": f"{ADM}/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    await custom.create_cluster_custom_object(ADM, "v1", "validatingadmissionpolicies", policy)
    await custom.create_cluster_custom_object(ADM, "v1", "validatingadmissionpolicybindings", binding)
    core = client.CoreV1Api(kube_api)

    async def enforced() -> bool:  # policies are compiled and picked up asynchronously
        svc = {"metadata": {"name": "probe-veto"}, "spec": {"ports": [{"port": 80}]}}
        try:
            await core.create_namespaced_service(namespace, svc)
        except ApiException as e:
            return e.status in (403, 422) and "vetoed by test policy" in (e.body or "")
        await core.delete_namespaced_service("probe-veto", namespace)
        return False

    await wait_for(enforced, 30, "the admission policy enforced")
    try:
        yield name
    finally:
        await custom.delete_cluster_custom_object(ADM, "v1", "validatingadmissionpolicybindings", name)
        await custom.delete_cluster_custom_object(ADM, "v1", "validatingadmissionpolicies", name)


@pytest.fixture
async def two_deployments_quota(kube_api: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_resource_quota(
        namespace,
        {"metadata": {"name": "two-deployments"}, "spec": {"hard": {"count/deployments.apps": "2"}}},
    )

    async def counted() -> bool:  # enforced once kube-controller-manager has computed its usage
        q = await core.read_namespaced_resource_quota("two-deployments", namespace)
        return bool(q.status and q.status.hard and q.status.used is not None)

    await wait_for(counted, 30, "the ResourceQuota tracked")


@pytest.fixture
def gpuctl(devcluster: DevCluster) -> Any:
    proc = ServiceProcess("gpuctl-server", "GPUPLANE_GPUCTL_", devcluster.kubeconfig)
    proc.start()
    yield proc
    proc.stop()


async def test_rejections_mid_batch_are_reported_per_item_and_nothing_is_half_created(
    kube_api: Any, namespace: str, veto_policy: str, two_deployments_quota: None, gpuctl: Any
) -> None:
    svc = "service: {port: 80}"
    docs = [
        job_yaml("compute", "web-a", namespace, service=svc),  # 0: created (Deployment 1 of 2)
        job_yaml("compute", "web-veto", namespace, service=svc),  # 1: Deployment ok, Service vetoed
        job_yaml("training", "train-veto", namespace),  # 2: Job vetoed
        job_yaml("training", "train-b", namespace),  # 3: created
        job_yaml("compute", "web-c", namespace, service=svc),  # 4: created (Deployment 2 of 2)
        job_yaml("compute", "web-d", namespace, service=svc),  # 5: over the quota
        job_yaml("compute", "web-a", namespace, service=svc),  # 6: name taken by item 0
    ]
    async with httpx.AsyncClient(base_url=f"{gpuctl.url}/api/v1", timeout=60) as api:
        r = await api.post("/jobs/batch", json={"yamlContents": docs})
    assert r.status_code == 201, r.text
    body = r.json()
    assert [(s["index"], s["jobId"]) for s in body["success"]] == [(0, "web-a"), (3, "train-b"), (4, "web-c")]
    failed = {f["index"]: f for f in body["failed"]}
    assert sorted(failed) == [1, 2, 5, 6], body
    assert "vetoed by test policy" in failed[1]["error"], failed[1]
    assert "vetoed by test policy" in failed[2]["error"], failed[2]
    assert failed[5]["status"] == 403 and "quota" in failed[5]["error"], failed[5]
    assert failed[6]["status"] == 409 and "already exists" in failed[6]["error"], failed[6]
    assert all(500 > f["status"] >= 400 for f in failed.values()), failed  # user-caused: never a 5xx

    apps, batch, core = client.AppsV1Api(kube_api), client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)

    async def names() -> dict[str, set[str]]:
        return {
            "deployments": {
                d.metadata.name for d in (await apps.list_namespaced_deployment(namespace)).items
            },
            "jobs": {j.metadata.name for j in (await batch.list_namespaced_job(namespace)).items},
            "services": {s.metadata.name for s in (await core.list_namespaced_service(namespace)).items},
        }

    want = {"deployments": {"web-a", "web-c"}, "jobs": {"train-b"}, "services": {"web-a", "web-c"}}

    async def settled() -> bool:  # the vetoed item's Deployment is deleted (grace 0) by gpuctl
        return await names() == want

    try:
        await wait_for(settled, 30, "only the created items' objects")
    except AssertionError:
        raise AssertionError(f"objects left: {await names()} (want {want})") from None
    # The surviving web-a is item 0's, untouched by the duplicate (item 6).
    dep = await apps.read_namespaced_deployment("web-a", namespace)
    assert dep.metadata.generation == 1

    async def no_stray_pods() -> bool:
        pods = (await core.list_namespaced_pod(namespace)).items
        return not [
            p
            for p in pods
            if p.metadata.labels.get("runwhere.ai/job-name") in ("web-veto", "train-veto", "web-d")
        ]

    await wait_for(no_stray_pods, 30, "no pod of a failed item")
