"""Software downloads (real git), HF token secrets, image prepull, CRD bundles and delete rules."""

from __future__ import annotations

import base64
import functools
import http.server
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from lens_testkit import MakeLens, poll, problem


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _commits(path: Path) -> int:
    out = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=path, capture_output=True, text=True)
    return int(out.stdout)


def _repo(path: Path, tags: list[str]) -> str:
    """A local repository with a README per tag; cloned through file:// so --depth applies."""
    path.mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=path)
    for tag in tags:
        (path / "README.md").write_text(f"release {tag}\n")
        _git("add", "README.md", cwd=path)
        _git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", tag, cwd=path)
        _git("tag", tag, cwd=path)
    return f"file://{path}"


async def test_software_downloads(make_lens: MakeLens, unreachable_kubeconfig: bytes, tmp_path: Path) -> None:
    llm_d = _repo(tmp_path / "repos/llm-d", ["v0.9.0", "v0.10.0"])
    bench = _repo(tmp_path / "repos/bench", ["v0.8.0"])
    lens = await make_lens(llm_d_repo_url=llm_d, llm_d_benchmark_repo_url=bench)
    cid = (await lens.register("Dl", unreachable_kubeconfig))["cluster"]["id"]
    url = f"/api/cluster/clusters/{cid}/software-downloads"

    idle = (await lens.request("GET", url)).json()
    assert idle["llmD"] == {"ref": "v0.10.0", "state": "idle", "path": None, "error": None}
    started = await lens.request("POST", url, json={"llmDRef": "ignored"})
    assert started.status_code == 202
    assert started.json()["llmD"]["state"] == "downloading" and started.json()["llmD"]["ref"] == "v0.10.0"
    assert started.json()["llmDBenchmark"] == {
        "ref": "v0.8.0",
        "state": "downloading",
        "path": None,
        "error": None,
    }

    async def get() -> dict[str, Any]:
        body: dict[str, Any] = (await lens.request("GET", url)).json()
        return body

    done = await poll(
        get, lambda s: s["llmD"]["state"] != "downloading" and s["llmDBenchmark"]["state"] != "downloading"
    )
    assert done["llmD"]["state"] == "ready", done
    path = Path(done["llmD"]["path"])
    assert (path / "README.md").read_text() == "release v0.10.0\n"  # the pinned tag, not main's tip
    assert _commits(path) == 1  # a shallow clone
    assert (Path(done["llmDBenchmark"]["path"]) / "README.md").read_text() == "release v0.8.0\n"
    # Idempotent: a second start changes nothing; the record shows the paths.
    again = await lens.request("POST", url)
    assert again.status_code == 202 and again.json() == done
    cluster = (await lens.request("GET", "/api/cluster/clusters")).json()["items"][0]
    assert (cluster["llmDRepoPath"], cluster["llmDBenchmarkRepoPath"]) == (
        done["llmD"]["path"],
        done["llmDBenchmark"]["path"],
    )
    problem(
        await lens.request("GET", "/api/cluster/clusters/deadbeef/software-downloads"),
        404,
        "cluster_not_found",
    )


async def test_software_download_failure_is_reported_and_retried(
    make_lens: MakeLens, unreachable_kubeconfig: bytes, tmp_path: Path
) -> None:
    repo = tmp_path / "repos/late"
    url_repo = _repo(repo, ["v0.1.0"])  # lacks the pinned refs
    lens = await make_lens(llm_d_repo_url=url_repo, llm_d_benchmark_repo_url=f"file://{tmp_path}/missing")
    cid = (await lens.register("Fail", unreachable_kubeconfig))["cluster"]["id"]
    url = f"/api/cluster/clusters/{cid}/software-downloads"
    await lens.request("POST", url)

    async def get() -> dict[str, Any]:
        body: dict[str, Any] = (await lens.request("GET", url)).json()
        return body

    failed = await poll(
        get, lambda s: s["llmD"]["state"] == "failed" and s["llmDBenchmark"]["state"] == "failed"
    )
    assert failed["llmD"]["path"] is None and "v0.10.0" in failed["llmD"]["error"]
    assert failed["llmDBenchmark"]["error"]
    # The ref appears upstream; starting again retries the failed download.
    (repo / "README.md").write_text("release v0.10.0\n")
    _git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-am", "x", cwd=repo)
    _git("tag", "v0.10.0", cwd=repo)
    assert (await lens.request("POST", url)).json()["llmD"]["state"] == "downloading"
    ready = await poll(get, lambda s: s["llmD"]["state"] != "downloading")
    assert ready["llmD"]["state"] == "ready" and ready["llmD"]["error"] is None


async def _secret(core: client.CoreV1Api, ns: str, name: str) -> str:
    s = await core.read_namespaced_secret(name, ns)
    return base64.b64decode(s.data["HF_TOKEN"]).decode()


async def _gone_or_terminating(core: client.CoreV1Api, ns: str) -> bool:
    try:
        obj = await core.read_namespace(ns)
    except ApiException as e:
        return e.status == 404
    return obj.metadata.deletion_timestamp is not None


async def test_hf_token_secret_create_rotate_and_delete_rules(
    make_lens: MakeLens, dev_kubeconfig: bytes, kube_api: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    lens = await make_lens()
    cid = (await lens.register("Hf", dev_kubeconfig))["cluster"]["id"]
    fresh_ns = f"llm-d-bench-storage-{cid}"
    url = f"/api/cluster/clusters/{cid}/hf-token-secrets"

    resp = await lens.request(
        "POST", url, json={"namespace": fresh_ns, "name": "hf-token-1", "token": "hf_one"}
    )
    assert resp.status_code == 200 and resp.json() == {"namespace": fresh_ns, "name": "hf-token-1"}
    assert await _secret(core, fresh_ns, "hf-token-1") == "hf_one"
    ns_obj = await core.read_namespace(fresh_ns)
    assert ns_obj.metadata.labels["app.kubernetes.io/managed-by"] == "llm-d-lens"
    record = (await lens.request("GET", "/api/cluster/clusters")).json()["items"][0]
    assert record["hfTokenSecret"] == {"namespace": fresh_ns, "name": "hf-token-1"}
    problem(
        await lens.request(
            "POST", url, json={"namespace": fresh_ns, "name": "hf-token-1", "token": "hf_two"}
        ),
        409,
        "secret_already_exists",
    )
    problem(
        await lens.request("POST", url, json={"namespace": fresh_ns, "name": "Bad_Name", "token": "x"}),
        422,
        "invalid_secret_ref",
    )
    problem(
        await lens.request("POST", url, json={"namespace": fresh_ns, "name": "n2", "token": ""}),
        422,
        "invalid_secret_token",
    )
    problem(
        await lens.request("POST", url, json={"namespace": fresh_ns, "name": "n2", "token": "x", "x": 1}),
        422,
        "unprocessable",
    )

    listed = (await lens.request("GET", "/api/cluster/model-secrets", params={"clusterId": cid})).json()
    assert listed["hostManagedAvailable"] is True
    assert [(i["namespace"], i["name"]) for i in listed["items"] if i["namespace"] == fresh_ns] == [
        (fresh_ns, "hf-token-1")
    ]
    assert all(set(i) == {"namespace", "name", "createdAt"} for i in listed["items"])

    rotate = f"/api/cluster/clusters/{cid}/hf-token-secret"
    resp = await lens.request("PUT", rotate, json={"token": "hf_rotated"})
    assert resp.status_code == 200 and resp.json() == {"namespace": fresh_ns, "name": "hf-token-1"}
    assert await _secret(core, fresh_ns, "hf-token-1") == "hf_rotated"
    problem(await lens.request("PUT", rotate, json={"token": ""}), 422, "invalid_secret_token")
    problem(await lens.request("PUT", rotate, json={}), 422, "invalid_secret_token")
    # Other coordinates re-point the record and create the Secret there.
    resp = await lens.request(
        "PUT", rotate, json={"namespace": namespace, "name": "hf-moved", "token": "hf_moved"}
    )
    assert resp.json() == {"namespace": namespace, "name": "hf-moved"}
    assert await _secret(core, namespace, "hf-moved") == "hf_moved"
    record = (await lens.request("GET", "/api/cluster/clusters")).json()["items"][0]
    assert record["hfTokenSecret"] == {"namespace": namespace, "name": "hf-moved"}

    # Delete: the test namespace holds another object, so only the Secret goes.
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "keep-me"}})
    assert (await lens.request("DELETE", f"/api/cluster/clusters/{cid}")).status_code == 204
    with pytest.raises(ApiException) as info:
        await core.read_namespaced_secret("hf-moved", namespace)
    assert info.value.status == 404
    assert not await _gone_or_terminating(core, namespace)
    await core.delete_namespace(fresh_ns)  # no longer the recorded one, so it was not Lens's to remove


async def test_delete_removes_namespaces_with_nothing_left(
    make_lens: MakeLens, dev_kubeconfig: bytes, kube_api: Any
) -> None:
    core = client.CoreV1Api(kube_api)
    lens = await make_lens()
    suffix = str(int(time.time() * 1000))[-7:]
    cases = {
        "lens-created": (f"lens-made-{suffix}", False),  # Lens creates it: deleted
        "only-injected": (f"bare-{suffix}", True),  # pre-existing, only default objects: deleted
        "default": ("default", True),  # never deleted
    }
    ids = {}
    for key, (ns, pre_create) in cases.items():
        if pre_create and ns != "default":
            await core.create_namespace({"metadata": {"name": ns}})
            await poll(
                lambda ns=ns: core.list_namespaced_config_map(ns),
                lambda cms: any(c.metadata.name == "kube-root-ca.crt" for c in cms.items),
            )
        cid = (await lens.register(f"Del {key}", dev_kubeconfig))["cluster"]["id"]
        ids[key] = cid
        resp = await lens.request(
            "POST",
            f"/api/cluster/clusters/{cid}/hf-token-secrets",
            json={"namespace": ns, "name": f"hf-{cid}", "token": "t"},
        )
        assert resp.status_code == 200, resp.text
    # Lens's own storage namespace goes even when it holds other objects and was not created by Lens.
    storage_cid = (await lens.register("Del storage", dev_kubeconfig))["cluster"]["id"]
    storage_ns = f"llm-d-bench-storage-{storage_cid}"
    await core.create_namespace({"metadata": {"name": storage_ns}})
    await core.create_namespaced_config_map(storage_ns, {"metadata": {"name": "model-cache-index"}})
    resp = await lens.request(
        "POST",
        f"/api/cluster/clusters/{storage_cid}/hf-token-secrets",
        json={"namespace": storage_ns, "name": "hf", "token": "t"},
    )
    assert resp.status_code == 200
    ids["storage"] = storage_cid
    for key, cid in ids.items():
        assert (await lens.request("DELETE", f"/api/cluster/clusters/{cid}")).status_code == 204, key
    assert await _gone_or_terminating(core, storage_ns)
    assert await _gone_or_terminating(core, cases["lens-created"][0])
    assert await _gone_or_terminating(core, cases["only-injected"][0])
    assert not await _gone_or_terminating(core, "default")
    with pytest.raises(ApiException):
        await core.read_namespaced_secret(f"hf-{ids['default']}", "default")


async def test_delete_conflicts_and_draft_storage(
    make_lens: MakeLens, dev_kubeconfig: bytes, kube_api: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    apps = client.AppsV1Api(kube_api)
    lens = await make_lens()
    cid = (await lens.register("Busy", dev_kubeconfig))["cluster"]["id"]
    labels = {"app.kubernetes.io/managed-by": "llm-d-lens", "app": "model"}
    await apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "model", "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "model"}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"nodeName": "cpu-node-0", "containers": [{"name": "c", "image": "x"}]},
                },
            },
        },
    )
    await poll(
        lambda: apps.read_namespaced_deployment("model", namespace),
        lambda d: (d.status.available_replicas or 0) > 0,
    )
    problem(
        await lens.request("DELETE", f"/api/cluster/clusters/{cid}"), 409, "cluster_has_available_deployments"
    )
    await apps.delete_namespaced_deployment("model", namespace)

    pv_name = f"lens-pv-{namespace}"[:63]
    await core.create_persistent_volume(
        {
            "metadata": {"name": pv_name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": "/tmp/models"},
                "storageClassName": "",
            },
        }
    )
    await core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "models", "labels": {"lens.llm-d.ai/storage-volume": "true"}},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "1Gi"}},
                "volumeName": pv_name,
                "storageClassName": "",
            },
        },
    )
    problem(await lens.request("DELETE", f"/api/cluster/clusters/{cid}"), 409, "cluster_has_storage_volumes")
    assert cid in {c["id"] for c in (await lens.request("GET", "/api/cluster/clusters")).json()["items"]}

    # As a draft, the same cluster may go, and its storage volumes go with it.
    await lens.request("PATCH", f"/api/cluster/clusters/{cid}", json={"draft": True})
    assert (await lens.request("DELETE", f"/api/cluster/clusters/{cid}")).status_code == 204

    async def pvc_gone() -> bool:
        try:
            pvc = await core.read_namespaced_persistent_volume_claim("models", namespace)
        except ApiException as e:
            return e.status == 404
        return pvc.metadata.deletion_timestamp is not None

    assert await pvc_gone()
    try:
        pv = await core.read_persistent_volume(pv_name)
        assert pv.metadata.deletion_timestamp is not None
    except ApiException as e:
        assert e.status == 404


async def test_image_prepull(make_lens: MakeLens, dev_kubeconfig: bytes, kube_api: Any) -> None:
    core = client.CoreV1Api(kube_api)
    ns = "lens-prepull-test"
    lens = await make_lens(prepull_namespace=ns)
    cid = (await lens.register("Pull", dev_kubeconfig))["cluster"]["id"]
    url = f"/api/cluster/clusters/{cid}/images/prepull"
    try:
        assert (await lens.request("GET", url)).json() == {
            "state": "idle",
            "desired": 0,
            "ready": 0,
            "images": [],
            "nodes": [],
        }
        problem(await lens.request("POST", url, json={"accelerators": ["tpu"]}), 422, "invalid_accelerator")
        resp = await lens.request("POST", url, json={"accelerators": ["nvidia", "intel"]})
        assert resp.status_code == 200, resp.text
        assert [i["name"] for i in resp.json()["images"]] == [
            "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.11.0",
            "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.11.0",
            "ghcr.io/llm-d/llm-d-inference-payload-processor:v0.1.0",
            "ghcr.io/llm-d/llm-d-cuda:v0.10.0",
            "ghcr.io/llm-d/llm-d-xpu:v0.10.0",
        ]
        node_names = {n.metadata.name for n in (await core.list_node()).items}

        async def get() -> dict[str, Any]:
            body: dict[str, Any] = (await lens.request("GET", url)).json()
            return body

        # Every node gets a puller (all taints tolerated), and kwok makes them Ready.
        done = await poll(get, lambda s: s["state"] == "ready", timeout=90)
        assert done["desired"] == done["ready"] == len(node_names)
        assert {n["node"] for n in done["nodes"]} == node_names
        assert all(n["ready"] and n["phase"] == "Running" and n["restarts"] == 0 for n in done["nodes"])
        assert all(
            i["state"] == "ready" and i["ready"] == i["desired"] == len(node_names) for i in done["images"]
        )
        ds = await client.AppsV1Api(kube_api).read_namespaced_daemon_set("lens-image-prepull", ns)
        spec = ds.spec.template.spec
        assert spec.host_pid and spec.tolerations[0].operator == "Exists"
        assert all(c.security_context.privileged for c in spec.containers)
        problem(
            await lens.request("GET", "/api/cluster/clusters/deadbeef/images/prepull"),
            404,
            "cluster_not_found",
        )

        # A puller that keeps crashing (3 restarts) marks its image failed.
        pods = await core.list_namespaced_pod(ns, label_selector="lens.llm-d.ai/prepull=lens-image-prepull")
        victim = pods.items[0]
        statuses = victim.status.container_statuses
        index = next(i for i, c in enumerate(statuses) if c.name.startswith("p3-"))  # the cuda puller
        await core.patch_namespaced_pod_status(
            victim.metadata.name,
            ns,
            [
                {"op": "replace", "path": f"/status/containerStatuses/{index}/restartCount", "value": 3},
                {"op": "replace", "path": f"/status/containerStatuses/{index}/ready", "value": False},
            ],
        )
        failed = await poll(get, lambda s: s["state"] == "failed")
        cuda = next(i for i in failed["images"] if "llm-d-cuda" in i["name"])
        assert cuda["state"] == "failed" and cuda["ready"] == len(node_names) - 1
        assert all(i["state"] == "ready" for i in failed["images"] if i is not cuda)
        [node] = [n for n in failed["nodes"] if n["node"] == victim.spec.node_name]
        assert node["restarts"] == 3
    finally:
        await core.delete_namespace(ns)


CRD_TEMPLATE = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.{group}
  annotations:
    api-approved.kubernetes.io: https://github.com/kubernetes-sigs/gateway-api/pull/1
spec:
  group: {group}
  names: {{kind: {kind}, plural: {plural}, listKind: {kind}List, singular: {singular}}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"""


def _crd(group: str, kind: str) -> str:
    return CRD_TEMPLATE.format(group=group, kind=kind, plural=kind.lower() + "s", singular=kind.lower())


@pytest.fixture
def bundle_server(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "bundles"
    root.mkdir()
    (root / "gateway-v1.5.1.yaml").write_text(
        "---".join(
            [_crd("gateway.networking.k8s.io", "Gateway"), _crd("gateway.networking.k8s.io", "HTTPRoute")]
        )
    )
    (root / "gie-v1.5.0.yaml").write_text(_crd("inference.networking.k8s.io", "InferencePool"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_crd_bundles(
    make_lens: MakeLens, dev_kubeconfig: bytes, kube_api: Any, bundle_server: str
) -> None:
    ext = client.ApiextensionsV1Api(kube_api)
    names = (
        "gateways.gateway.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io",
        "inferencepools.inference.networking.k8s.io",
    )
    for name in names:
        try:
            await ext.delete_custom_resource_definition(name)
        except ApiException as e:
            assert e.status == 404
    lens = await make_lens(
        gateway_api_crds_url=bundle_server + "/gateway-{version}.yaml",
        gateway_api_inference_extension_crds_url=bundle_server + "/gie-{version}.yaml",
    )
    cid = (await lens.register("Crds", dev_kubeconfig))["cluster"]["id"]
    url = f"/api/cluster/clusters/{cid}/crds"

    async def status() -> dict[str, Any]:
        body: dict[str, Any] = (await lens.request("GET", url)).json()
        return body

    await poll(
        status, lambda s: s == {"gateway_api": "missing", "gateway_api_inference_extension": "missing"}
    )
    applied = await lens.request("POST", url)
    assert applied.json() == {
        "gateway_api": {"ok": True, "message": ""},
        "gateway_api_inference_extension": {"ok": True, "message": ""},
    }
    assert await status() == {"gateway_api": "ready", "gateway_api_inference_extension": "ready"}
    assert (await lens.request("POST", url)).json()["gateway_api"]["ok"] is True  # idempotent
    crd = await ext.read_custom_resource_definition("gateways.gateway.networking.k8s.io")
    assert any(m.manager == "llm-d-lens" and m.operation == "Apply" for m in crd.metadata.managed_fields)

    broken = await make_lens(
        data_dir=lens.settings.data_dir.parent / "broken",
        gateway_api_crds_url=bundle_server + "/missing-{version}.yaml",
        gateway_api_inference_extension_crds_url=bundle_server + "/gie-{version}.yaml",
    )
    bid = (await broken.register("Crds2", dev_kubeconfig))["cluster"]["id"]
    result = (await broken.request("POST", f"/api/cluster/clusters/{bid}/crds")).json()
    assert result["gateway_api"]["ok"] is False and "404" in result["gateway_api"]["message"]
    assert result["gateway_api_inference_extension"] == {"ok": True, "message": ""}
