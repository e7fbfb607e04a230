"""The job API against a real control plane with kwok GPU nodes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import websockets
from gpuctl_helpers import eventually, job_yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

# What kwok's ClusterLogs serves for every pod of the devcluster.
KWOK_LOG = [
    "devcluster: container started",
    "devcluster: this pod runs on a kwok node; these lines are served by kwok's ClusterLogs",
    "devcluster: still running",
]


async def create(api: httpx.AsyncClient, text: str) -> httpx.Response:
    return await api.post("/jobs", json={"yamlContent": text})


async def status_of(api: httpx.AsyncClient, name: str, ns: str) -> str:
    r = await api.get(f"/jobs/{name}", params={"namespace": ns})
    return str(r.json().get("status")) if r.status_code == 200 else f"HTTP {r.status_code}"


async def wait_status(api: httpx.AsyncClient, name: str, ns: str, want: str, timeout: float = 45) -> None:
    async def check() -> bool:
        return await status_of(api, name, ns) == want

    await eventually(check, timeout, f"{ns}/{name} to be {want}")


async def listed(api: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    r = await api.get("/jobs", params=params)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def ws_url(api: httpx.AsyncClient, path: str) -> str:
    return str(api.base_url).replace("http", "ws", 1).rstrip("/") + path


# ---- base ----------------------------------------------------------------------------------


async def test_root_health_and_docs(gpuctl_url: str) -> None:
    async with httpx.AsyncClient(base_url=gpuctl_url) as c:
        assert (await c.get("/")).json() == {"message": "GPU Control API", "version": "1.0.0"}
        h = (await c.get("/health")).json()
        assert h["status"] == "healthy" and h["timestamp"]
        assert (await c.get("/docs")).status_code == 200
        assert "/api/v1/jobs" in (await c.get("/openapi.json")).json()["paths"]


async def test_server_ensures_priority_classes(api: httpx.AsyncClient, kube_api: Any) -> None:
    sched = client.SchedulingV1Api(kube_api)
    values = {n: (await sched.read_priority_class(f"gpuctl-{n}")).value for n in ("high", "medium", "low")}
    assert values == {"high": 1_000_000, "medium": 500_000, "low": 100}


# ---- every kind ----------------------------------------------------------------------------


async def test_every_kind_gets_its_objects_and_runs(
    api: httpx.AsyncClient, namespace: str, kube_api: Any
) -> None:
    apps, batch, core = client.AppsV1Api(kube_api), client.BatchV1Api(kube_api), client.CoreV1Api(kube_api)
    docs = {
        "train": job_yaml("training", "train", namespace, gpu=1),
        "serve": job_yaml(
            "inference", "serve", namespace, gpu=1, service="service: {port: 8000, replicas: 2}"
        ),
        "nb": job_yaml("notebook", "nb", namespace, gpu=1),
        "web": job_yaml("compute", "web", namespace, service="service: {port: 80}"),
    }
    for name, text in docs.items():
        r = await create(api, text)
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["jobId"] == body["name"] == name and body["status"] == "pending"
        assert body["createdAt"] and body["message"]

    job = await batch.read_namespaced_job("train", namespace)
    assert job.spec.template.spec.restart_policy == "Never" and job.spec.backoff_limit == 3
    dep = await apps.read_namespaced_deployment("serve", namespace)
    assert dep.spec.replicas == 2
    sts = await apps.read_namespaced_stateful_set("nb", namespace)
    assert sts.spec.replicas == 1
    await apps.read_namespaced_deployment("web", namespace)
    for name, port in (("serve", 8000), ("nb", 8888), ("web", 80)):
        svc = await core.read_namespaced_service(name, namespace)
        assert svc.spec.type == "NodePort" and svc.spec.ports[0].port == port
    with pytest.raises(ApiException):
        await core.read_namespaced_service("train", namespace)

    await wait_status(api, "train", namespace, "Completed")
    for name in ("serve", "nb", "web"):
        await wait_status(api, name, namespace, "Running")

    pods = (await core.list_namespaced_pod(namespace)).items
    for p in pods:
        gpu = p.metadata.labels["runwhere.ai/job-name"] != "web"
        assert p.spec.node_name.startswith("gpu-node-") == gpu, (p.metadata.name, p.spec.node_name)
        assert p.spec.priority_class_name == "gpuctl-medium" and p.spec.priority == 500_000


async def test_job_namespace_is_honoured_and_unknown_namespace_is_404(
    api: httpx.AsyncClient, namespace: str
) -> None:
    r = await create(api, job_yaml("training", "where", namespace))
    assert r.status_code == 201 and r.json()["namespace"] == namespace
    r = await create(api, job_yaml("training", "where", "no-such-namespace-x"))
    assert r.status_code == 404
    assert r.json() == {"error": "namespace no-such-namespace-x not found"}


async def test_name_taken_is_409_across_kinds(api: httpx.AsyncClient, namespace: str) -> None:
    assert (await create(api, job_yaml("training", "dup", namespace))).status_code == 201
    r = await create(api, job_yaml("compute", "dup", namespace))
    assert r.status_code == 409
    assert r.json()["error"] == f"job dup already exists in namespace {namespace}"


# ---- 4xx on input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "status", "needle"),
    [
        ("kind: training\njob: {name: x\n", 400, "invalid YAML at line"),
        ("kind: training\nversion: v0.1\nbogus: 1\n", 400, "unknown key 'bogus' at bogus"),
        ("a: " + "[" * 2000 + "]" * 2000, 400, "nested deeper"),
        ("a: " + "x" * 300_000, 400, "exceeds"),
        ('a: &a ["l","l","l","l","l","l","l","l"]\n' + "\n".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 8) + "]" for i in range(8)
        ), 400, "aliases"),
        ("- just\n- a list\n", 400, "must be a mapping"),
    ],
)  # fmt: skip
async def test_bad_documents(api: httpx.AsyncClient, text: str, status: int, needle: str) -> None:
    r = await create(api, text)
    assert r.status_code == status
    body = r.json()
    assert list(body) == ["error"] and needle in body["error"]


async def test_unknown_key_in_a_job_is_named(api: httpx.AsyncClient, namespace: str) -> None:
    text = job_yaml("training", "k", namespace).replace("memory: 1Gi", "memory: 1Gi, gpuz: 1")
    r = await create(api, text)
    assert r.status_code == 400
    assert r.json() == {"error": "unknown key 'gpuz' at resources.gpuz"}


@pytest.mark.parametrize(
    "body", [{}, {"yamlContent": 3}, {"yamlContent": "x", "extra": 1}, {"yaml": "kind: training"}]
)
async def test_bad_request_bodies(api: httpx.AsyncClient, body: dict[str, Any]) -> None:
    r = await api.post("/jobs", json=body)
    assert r.status_code == 400 and "error" in r.json()


async def test_fractional_job_without_controller_is_refused_with_500(
    api: httpx.AsyncClient, namespace: str
) -> None:
    """Never admitted unchecked; the spec answers server-side failures with 500."""
    text = job_yaml("training", "frac", namespace).replace("gpu: 0}", "gpuShare: {tflops: 10, vram: 1Gi}}")
    r = await create(api, text)
    assert r.status_code == 500
    assert "controller" in r.json()["error"]
    assert (await api.get("/jobs/frac", params={"namespace": namespace})).status_code == 404


# ---- batch ---------------------------------------------------------------------------------


async def test_batch_reports_each_item(api: httpx.AsyncClient, namespace: str) -> None:
    docs = [
        job_yaml("training", "b-one", namespace),
        "kind: unknown\nversion: v0.1\n",
        job_yaml("compute", "b-two", namespace, service="service: {port: 80}"),
        job_yaml("training", "b-one", namespace),
    ]
    r = await api.post("/jobs/batch", json={"yamlContents": docs})
    assert r.status_code == 201
    body = r.json()
    assert [(s["index"], s["jobId"]) for s in body["success"]] == [(0, "b-one"), (2, "b-two")]
    assert [f["index"] for f in body["failed"]] == [1, 3]
    assert "kind" in body["failed"][0]["error"] and body["failed"][0]["status"] == 400
    assert "already exists" in body["failed"][1]["error"] and body["failed"][1]["status"] == 409


# ---- list ----------------------------------------------------------------------------------


async def test_list_filters_and_consistent_pages(api: httpx.AsyncClient, namespace: str) -> None:
    await create(api, job_yaml("inference", "many", namespace, service="service: {port: 80, replicas: 5}"))
    await create(api, job_yaml("training", "one", namespace))

    async def six() -> dict[str, Any] | None:
        d = await listed(api, namespace=namespace, pageSize=100)
        return d if d["total"] == 6 else None

    everything = await eventually(six, 45, "6 pods listed")
    item = everything["items"][0]
    assert set(item) == {"jobId", "name", "namespace", "kind", "status", "ready", "node", "ip", "age"}
    all_ids = [i["jobId"] for i in everything["items"]]
    pages = [await listed(api, namespace=namespace, pageSize=4, page=p) for p in (1, 2, 3)]
    assert [p["total"] for p in pages] == [6, 6, 6]
    assert [i["jobId"] for p in pages for i in p["items"]] == all_ids
    assert pages[2]["items"] == []

    inf = await listed(api, namespace=namespace, kind="inference")
    assert inf["total"] == 5 and {i["name"] for i in inf["items"]} == {"many"}

    async def completed() -> bool:
        d = await listed(api, namespace=namespace, status="completed")
        return [i["name"] for i in d["items"]] == ["one"]

    await eventually(completed, 30, "training pod Completed")
    assert (await listed(api, namespace=namespace, pool="nope"))["total"] == 0


@pytest.mark.parametrize("params", [{"pageSize": 101}, {"pageSize": 0}, {"page": 0}, {"kind": "batch"}])
async def test_list_rejects_bad_parameters(api: httpx.AsyncClient, params: dict[str, Any]) -> None:
    r = await api.get("/jobs", params=params)
    assert r.status_code == 400 and "error" in r.json()


# ---- detail --------------------------------------------------------------------------------


async def test_detail_of_training_by_job_or_pod_name(api: httpx.AsyncClient, namespace: str) -> None:
    text = job_yaml("training", "det", namespace, gpu=2).replace(
        "job: {name: det,", "job: {description: hi, name: det,"
    )
    assert (await create(api, text)).status_code == 201
    await wait_status(api, "det", namespace, "Completed")
    d = (await api.get("/jobs/det", params={"namespace": namespace})).json()
    assert d["job_id"] == "det" and d["name"] == "det" and d["namespace"] == namespace
    assert d["kind"] == "training" and d["resource_type"] == "Job"
    assert d["priority"] == "medium" and d["pool"] is None and d["description"] == "hi"
    assert d["resources"] == {"gpu": 2, "cpu": 1, "memory": "1Gi"}
    assert d["started"] and d["completed"] and d["completed"] >= d["started"]
    assert d["access_methods"] is None and d["metrics"] == {}
    assert d["yaml_content"]["environment"]["command"] == ["sh", "-c", "echo hello"]
    assert d["yaml_content"]["job"]["description"] == "hi"
    reasons = {e["reason"] for e in d["events"]}
    assert "SuccessfulCreate" in reasons, d["events"]
    assert set(d["events"][0]) == {"age", "type", "reason", "from", "object", "message"}

    pod = d["pods"][0]
    by_pod = (await api.get(f"/jobs/{pod}")).json()  # no namespace: searched
    assert by_pod["job_id"] == pod and by_pod["name"] == "det" and by_pod["namespace"] == namespace


async def test_detail_access_methods_for_services(api: httpx.AsyncClient, namespace: str) -> None:
    await create(api, job_yaml("notebook", "note", namespace))
    await wait_status(api, "note", namespace, "Running")
    d = (await api.get("/jobs/note", params={"namespace": namespace})).json()
    am = d["access_methods"]
    assert d["resource_type"] == "StatefulSet"
    assert am["pod_ip_access"]["port"] == 8888 and am["pod_ip_access"]["pod_ip"]
    assert am["pod_ip_access"]["url"] == f"http://{am['pod_ip_access']['pod_ip']}:8888"
    assert 30000 <= am["node_port_access"]["node_port"] <= 32767
    assert am["node_port_access"]["node_ip"]


async def test_detail_404s(api: httpx.AsyncClient, namespace: str) -> None:
    r = await api.get("/jobs/nothing-here", params={"namespace": namespace})
    assert r.status_code == 404 and r.json() == {
        "error": f"job nothing-here not found in namespace {namespace}"
    }
    r = await api.get("/jobs/x", params={"namespace": "no-such-ns-y"})
    assert r.status_code == 404


# ---- delete --------------------------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True])
async def test_delete_removes_everything(
    api: httpx.AsyncClient, namespace: str, kube_api: Any, force: bool
) -> None:
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    await create(api, job_yaml("inference", "gone", namespace, service="service: {port: 80, replicas: 2}"))
    await wait_status(api, "gone", namespace, "Running")
    r = await api.delete("/jobs/gone", params={"namespace": namespace, "force": str(force).lower()})
    assert r.status_code == 200
    assert r.json()["jobId"] == "gone" and r.json()["status"] == "terminating"

    async def all_gone() -> bool:
        deps = (await apps.list_namespaced_deployment(namespace)).items
        svcs = (await core.list_namespaced_service(namespace)).items
        pods = (await core.list_namespaced_pod(namespace)).items
        return not deps and not svcs and not pods

    await eventually(all_gone, 10 if force else 60, "deployment, service and pods deleted")
    assert (await api.delete("/jobs/gone", params={"namespace": namespace})).status_code == 404


# ---- logs ----------------------------------------------------------------------------------


async def test_logs_tail_and_pod(api: httpx.AsyncClient, namespace: str) -> None:
    await create(api, job_yaml("training", "talk", namespace))
    await wait_status(api, "talk", namespace, "Completed")
    r = await api.get("/jobs/talk/logs", params={"namespace": namespace, "tail": 2})
    assert r.status_code == 200
    body = r.json()
    assert body["logs"] == KWOK_LOG[1:]
    assert body["lastTimestamp"] == "2026-01-01T00:00:02.000000000Z"  # the stamp kwok gives the last line
    full = (await api.get("/jobs/talk/logs", params={"namespace": namespace, "pod": body["pod"]})).json()
    assert len(full["logs"]) == 3
    r = await api.get("/jobs/talk/logs", params={"namespace": namespace, "pod": "someone-else"})
    assert r.status_code == 404 and "not part of job" in r.json()["error"]
    assert (await api.get("/jobs/talk/logs", params={"namespace": namespace, "tail": 0})).status_code == 400
    assert (await api.get("/jobs/nobody/logs", params={"namespace": namespace})).status_code == 404


async def _read_ws(url: str, timeout: float = 20) -> tuple[list[dict[str, Any]], int | None]:
    msgs: list[dict[str, Any]] = []
    async with websockets.connect(url) as ws:
        try:
            async with asyncio.timeout(timeout):
                async for raw in ws:
                    msgs.append(json.loads(raw))
        except websockets.ConnectionClosed:
            pass
        return msgs, ws.close_code


async def test_ws_follows_a_finished_pod_and_ends(api: httpx.AsyncClient, namespace: str) -> None:
    await create(api, job_yaml("training", "wsdone", namespace))
    await wait_status(api, "wsdone", namespace, "Completed")
    msgs, code = await _read_ws(ws_url(api, f"/jobs/wsdone/logs/ws?namespace={namespace}"))
    assert [m["data"] for m in msgs if m["type"] == "log"] == KWOK_LOG
    assert msgs[-1] == {"type": "end"} and code == 1000


async def test_ws_streams_a_running_pod_until_it_goes(api: httpx.AsyncClient, namespace: str) -> None:
    await create(api, job_yaml("compute", "wslive", namespace, service="service: {port: 80}"))
    await wait_status(api, "wslive", namespace, "Running")
    url = ws_url(api, f"/jobs/wslive/logs/ws?namespace={namespace}")
    async with websockets.connect(url) as ws:
        first = [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(3)]
        assert [m["type"] for m in first] == ["log"] * 3
        # A follow, not a poll: nothing is re-sent while the pod keeps running.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ws.recv(), 3)
        r = await api.delete("/jobs/wslive", params={"namespace": namespace, "force": "true"})
        assert r.status_code == 200
        last = json.loads(await asyncio.wait_for(ws.recv(), 20))
        assert last == {"type": "end"}
        with pytest.raises(websockets.ConnectionClosedOK):
            await asyncio.wait_for(ws.recv(), 5)


async def test_ws_client_leaving_early_is_fine(api: httpx.AsyncClient, namespace: str) -> None:
    await create(api, job_yaml("compute", "wsleave", namespace, service="service: {port: 80}"))
    await wait_status(api, "wsleave", namespace, "Running")
    url = ws_url(api, f"/jobs/wsleave/logs/ws?namespace={namespace}")
    for _ in range(3):
        async with websockets.connect(url) as ws:
            await asyncio.wait_for(ws.recv(), 10)
    assert (await api.get("/jobs", params={"namespace": namespace})).status_code == 200


async def test_ws_unknown_job(api: httpx.AsyncClient, namespace: str) -> None:
    msgs, code = await _read_ws(ws_url(api, f"/jobs/ghost/logs/ws?namespace={namespace}"))
    assert msgs == [{"type": "error", "data": f"job ghost not found in namespace {namespace}"}]
    assert code == 4404


async def test_same_name_in_two_namespaces_needs_a_namespace(
    api: httpx.AsyncClient, namespace: str, kube_api: Any
) -> None:
    core = client.CoreV1Api(kube_api)
    other = f"{namespace[:50]}-b"
    await core.create_namespace(body={"metadata": {"name": other}})
    try:
        for ns in (namespace, other):
            assert (await create(api, job_yaml("training", "twin", ns))).status_code == 201
        r = await api.get("/jobs/twin")
        assert r.status_code == 409 and "pass namespace" in r.json()["error"]
        assert (await api.get("/jobs/twin", params={"namespace": other})).json()["namespace"] == other
    finally:
        await core.delete_namespace(other)
