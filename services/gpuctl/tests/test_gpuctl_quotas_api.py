"""Quotas and namespaces against the devcluster, with quota enforced on jobs end to end."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from gpuctl_helpers import eventually, job_yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException


def quota_doc(name: str, namespaces: dict[str, str], default: str | None = None) -> str:
    lines = ["kind: quota", "version: v0.1", f"quota: {{name: {name}, description: for tests}}"]
    if namespaces:
        lines.append("namespace:")
        lines += [f"  {ns}: {limits}" for ns, limits in namespaces.items()]
    if default:
        lines.append(f"default: {default}")
    return "\n".join(lines) + "\n"


@pytest.fixture
async def team(kube_api: Any) -> AsyncIterator[str]:
    """A namespace name that gpuctl creates through a quota; removed afterwards."""
    name = f"team-{secrets.token_hex(3)}"
    yield name
    try:
        await client.CoreV1Api(kube_api).delete_namespace(name)
    except ApiException as e:
        if e.status != 404:
            raise


async def test_quota_create_list_detail_delete(api: httpx.AsyncClient, team: str, kube_api: Any) -> None:
    core = client.CoreV1Api(kube_api)
    r = await api.post(
        "/quotas", json={"yamlContent": quota_doc("tq", {team: "{cpu: 16, memory: 64Gi, gpu: 4}"})}
    )
    assert r.status_code == 201, r.text
    assert r.json()["namespaces"] == [team]

    ns = await core.read_namespace(team)
    assert ns.metadata.labels["runwhere.ai/namespace"] == "true"
    rq = await core.read_namespaced_resource_quota(f"tq-{team}", team)
    assert rq.metadata.labels == {"runwhere.ai/quota": "tq", "runwhere.ai/namespace": team}
    assert rq.spec.hard == {"cpu": "16", "memory": "64Gi", "requests.nvidia.com/gpu": "4"}

    listed = (await api.get("/quotas", params={"namespace": team})).json()
    assert listed["total"] == 1 and listed["items"][0]["gpu"] == "4"
    assert any(q["namespace"] == team for q in (await api.get("/quotas")).json()["items"])
    d = (await api.get(f"/quotas/{team}")).json()
    assert d["hard"]["requests.nvidia.com/gpu"] == "4" and d["used"]["requests.nvidia.com/gpu"] == "0"
    assert d["description"] == "for tests" and d["quota"] == "tq"

    # one gpuctl quota per namespace
    r = await api.post("/quotas", json={"yamlContent": quota_doc("tq2", {team: "{gpu: 1}"})})
    assert r.status_code == 409 and team in r.json()["error"]

    # the namespace is now a gpuctl namespace, with its quota
    names = [n["name"] for n in (await api.get("/namespaces")).json()["items"]]
    assert team in names and "default" in names and "kube-system" not in names
    nd = (await api.get(f"/namespaces/{team}")).json()
    assert nd["quota"]["hard"]["cpu"] == "16"

    r = await api.delete(f"/quotas/{team}")
    assert r.status_code == 200 and r.json()["deleted"] == [f"tq-{team}"]
    assert (await api.get(f"/quotas/{team}")).status_code == 404
    assert (await api.delete(f"/quotas/{team}")).status_code == 404

    r = await api.delete(f"/namespaces/{team}")
    assert r.status_code == 200 and r.json()["status"] == "Terminating"


async def test_quota_document_errors(api: httpx.AsyncClient) -> None:
    cases = [
        ("kind: quota\nversion: v0.1\nquota: {name: q}\nnamespace: {a: {gpu: 1, typo: 2}}\n", "typo"),
        ("kind: quota\nversion: v0.1\nquota: {name: q}\nnamespace: {a: {gpu: -1}}\n", "namespace.a.gpu"),
        ("kind: quota\nversion: v0.1\nquota: {name: q}\nnamespace: {a: {cpu: lots}}\n", "namespace.a.cpu"),
        ("kind: quota\nversion: v0.1\nquota: {name: q}\nnamespace: {Bad_NS: {gpu: 1}}\n", "Bad_NS"),
        ("kind: quota\nversion: v0.1\nquota: {name: q}\n", "namespace"),
        ("kind: job\nversion: v0.1\nquota: {name: q}\ndefault: {gpu: 1}\n", "kind"),
        ("kind: quota\nversion: v0.1\nquota: {name: q}\ndefault: {gpu: 1\n", "invalid YAML"),
        ("a: &a [1]\nb: [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, "
         "*a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n", "aliases"),
    ]  # fmt: skip
    for doc, word in cases:
        r = await api.post("/quotas", json={"yamlContent": doc})
        assert r.status_code == 400, (doc, r.text)
        assert word in r.json()["error"], (doc, r.json())
    assert (await api.post("/quotas", json={"yaml": "x"})).status_code == 400
    assert (await api.get("/quotas/no-such-ns")).status_code == 404
    assert (await api.get("/quotas", params={"namespace": "no-such-ns"})).status_code == 404


async def test_job_over_quota_is_refused_naming_the_resource(api: httpx.AsyncClient, team: str) -> None:
    doc = quota_doc("eq", {team: "{cpu: 4, memory: 8Gi, gpu: 2}"})
    assert (await api.post("/quotas", json={"yamlContent": doc})).status_code == 201

    r = await api.post("/jobs", json={"yamlContent": job_yaml("training", "big", team, gpu=3)})
    assert r.status_code == 403, r.text
    assert "requests.nvidia.com/gpu" in r.json()["error"] and "exceeded quota eq-" in r.json()["error"]

    # two replicas of 1 CPU, 1Gi and 1 GPU each fit (2 of 2 GPUs)
    ok = job_yaml("inference", "fits", team, gpu=1, service="service: {port: 8000, replicas: 2}")
    assert (await api.post("/jobs", json={"yamlContent": ok})).status_code == 201

    async def used2() -> bool:
        d = (await api.get(f"/quotas/{team}")).json()
        return bool(d["used"]["requests.nvidia.com/gpu"] == "2")

    await eventually(used2, 45, "quota to count 2 GPUs used")
    d = (await api.get(f"/quotas/{team}")).json()
    assert d["used"]["cpu"] == "2" and d["used"]["memory"] == "2Gi"

    r = await api.post("/jobs", json={"yamlContent": job_yaml("training", "one-more", team, gpu=1)})
    assert r.status_code == 403 and "requests.nvidia.com/gpu" in r.json()["error"]
    # CPU alone can exceed it too
    cpu_heavy = job_yaml("training", "cpu-heavy", team).replace("cpu: 1,", "cpu: 3,")
    r = await api.post("/jobs", json={"yamlContent": cpu_heavy})
    assert r.status_code == 403 and "cpu" in r.json()["error"]


async def test_apiserver_quota_refusal_maps_to_403(
    api: httpx.AsyncClient, namespace: str, kube_api: Any
) -> None:
    """A quota gpuctl does not model (deployment count) is enforced by the apiserver; its 403 passes on."""
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_resource_quota(
        namespace, {"metadata": {"name": "no-deploys"}, "spec": {"hard": {"count/deployments.apps": "0"}}}
    )

    async def refused() -> httpx.Response | None:
        doc = job_yaml("inference", "blocked", namespace, service="service: {port: 8000}")
        r = await api.post("/jobs", json={"yamlContent": doc})
        return r if r.status_code == 403 else None

    r = await eventually(refused, 30, "apiserver to enforce the new quota")
    assert "exceeded quota" in r.json()["error"] and "count/deployments.apps" in r.json()["error"]


async def test_namespace_error_paths(api: httpx.AsyncClient, namespace: str) -> None:
    # the per-test namespace is not labelled by gpuctl
    r = await api.delete(f"/namespaces/{namespace}")
    assert r.status_code == 403 and "not managed by gpuctl" in r.json()["error"]
    assert (await api.get(f"/namespaces/{namespace}")).status_code == 403
    for protected in ("default", "kube-system"):
        r = await api.delete(f"/namespaces/{protected}")
        assert r.status_code == 403 and "never deleted" in r.json()["error"]
    r = await api.delete("/namespaces/no-such-ns")
    assert r.status_code == 404 and r.json()["error"] == "namespace no-such-ns not found"
    d = (await api.get("/namespaces/default")).json()
    assert d["name"] == "default" and d["status"] == "Active"
