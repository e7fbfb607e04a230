"""The 集群 endpoints against the devcluster: lifecycle with concrete values, errors, restart, secrecy."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from lens_testkit import MakeLens, kubeconfig_with, poll, problem

from devcluster.k8s_ops import create_node, wait_nodes_ready
from devcluster.nodes import NodeShape, gpu_node
from gpuplane_core.errors import InternalError


async def _default_service_account(core: client.CoreV1Api, namespace: str) -> None:
    """Pods are refused until the namespace's default ServiceAccount exists; a busy
    kube-controller-manager can take long to add it, so add it ourselves."""
    try:
        await core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    except ApiException as e:
        if e.status != 409:
            raise


async def _intel_node(core: client.CoreV1Api, name: str, gpus: int) -> None:
    node = gpu_node(name, NodeShape(gpus=0))
    caps = node["status"]["capacity"]
    del caps["nvidia.com/gpu"]
    caps["gpu.intel.com/i915"] = str(gpus)
    for key in [k for k in node["metadata"]["labels"] if k.startswith("nvidia.com/")]:
        del node["metadata"]["labels"][key]
    node["spec"]["taints"] = [{"key": "gpu.intel.com/i915", "value": "present", "effect": "NoSchedule"}]
    await create_node(core, node)


async def test_lifecycle_with_concrete_values(
    make_lens: MakeLens, dev_kubeconfig: bytes, kube_api: Any, make_gpu_nodes: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    apps = client.AppsV1Api(kube_api)
    lens = await make_lens()

    # register
    created = await lens.register(
        "Primary cluster",
        dev_kubeconfig,
        description="Shared GPU cluster",
        proxy='{"mode":"custom","httpProxy":"http://proxy.example:3128","httpsProxy":"http://proxy.example:3128","noProxy":"127.0.0.1,localhost,.svc"}',
        gatewayProvider="istio",
        gatewayPort=30080,
        inotifyMaxUserInstances=4096,
        llmDRef="v0.0.1-ignored",
    )
    cluster = created["cluster"]
    cid = cluster["id"]
    assert len(cid) == 8 and int(cid, 16) >= 0
    assert created["sessionId"] and len(created["sessionId"]) == 36
    assert cluster | {"createdAt": None, "updatedAt": None} == {
        "id": cid,
        "name": "Primary cluster",
        "description": "Shared GPU cluster",
        "createdAt": None,
        "updatedAt": None,
        "ready": True,
        "reason": None,
        "proxy": {
            "mode": "custom",
            "httpProxy": "http://proxy.example:3128",
            "httpsProxy": "http://proxy.example:3128",
            "noProxy": "127.0.0.1,localhost,.svc",
        },
        "llmDRef": "v0.10.0",
        "llmDBenchmarkRef": "v0.8.0",
        "llmDRepoPath": None,
        "llmDBenchmarkRepoPath": None,
        "hfTokenSecret": None,
        "gatewayProvider": "istio",
        "gatewayNamespace": f"lens-gateway-{cid}",
        "gatewayPort": 30080,
        "gatewayPublicUrl": None,
        "gatewayAuthzHost": "10.1.2.3",  # auto-filled from the Lens hosts for a provider with a Lens hook
        "inotifyMaxUserInstances": 4096,
        "draft": False,
    }
    assert cluster["createdAt"].endswith("Z")

    # list
    listed = (await lens.request("GET", "/api/cluster/clusters")).json()["items"]
    assert [c["id"] for c in listed] == [cid] and listed[0]["ready"] is True

    # PATCH: every documented field persisted, versions ignored, suffix rule
    patch = {
        "name": "Renamed",
        "description": "new",
        "proxy": {"mode": "auto"},
        "llmDRef": "v9.9.9",
        "gatewayProvider": "agentgateway",
        "gatewayNamespace": "custom",
        "gatewayPort": 31000,
        "gatewayPublicUrl": "gw.example.com",
        "gatewayAuthzHost": "10.9.8.7",
        "draft": False,
    }
    resp = await lens.request("PATCH", f"/api/cluster/clusters/{cid}", json=patch)
    assert resp.status_code == 200, resp.text
    assert resp.json()["sessionId"] is None
    updated = resp.json()["cluster"]
    assert (updated["name"], updated["description"], updated["proxy"]["mode"]) == ("Renamed", "new", "auto")
    assert updated["llmDRef"] == "v0.10.0"
    assert updated["gatewayNamespace"] == f"custom-{cid}"
    assert (updated["gatewayProvider"], updated["gatewayPort"]) == ("agentgateway", 31000)
    assert (updated["gatewayPublicUrl"], updated["gatewayAuthzHost"]) == ("gw.example.com", "10.9.8.7")
    assert updated["inotifyMaxUserInstances"] == 4096  # not lost by a PATCH that does not name it
    again = await lens.request(
        "PATCH", f"/api/cluster/clusters/{cid}", json={"gatewayNamespace": f"custom-{cid}"}
    )
    assert again.json()["cluster"]["gatewayNamespace"] == f"custom-{cid}"  # suffix not added twice
    inotify = await lens.request(
        "PATCH", f"/api/cluster/clusters/{cid}", json={"inotifyMaxUserInstances": 16384}
    )
    assert inotify.json()["cluster"]["inotifyMaxUserInstances"] == 16384

    # session: get-or-create returns the registration's session
    sess = (await lens.request("GET", "/api/cluster/session", params={"clusterId": cid})).json()
    assert sess["sessionId"] == created["sessionId"] and sess["cluster"]["name"] == "Renamed"
    sid = sess["sessionId"]
    version = (await lens.request("GET", f"/api/cluster/sessions/{sid}/planning-discovery/version")).json()
    assert version["result"]["major"] == "1"
    nodes = (await lens.request("GET", f"/api/cluster/sessions/{sid}/planning-discovery/nodes")).json()
    assert {"gpu-node-0", "gpu-node-1"} <= {n["metadata"]["name"] for n in nodes["result"]["items"]}
    for res in ("deviceclasses", "resourceslices", "runtimeclasses"):
        r = await lens.request("GET", f"/api/cluster/sessions/{sid}/planning-discovery/{res}")
        assert r.status_code == 200 and r.json()["result"]["items"] is not None
    problem(
        await lens.request("GET", f"/api/cluster/sessions/{sid}/planning-discovery/secrets"),
        404,
        "unknown_discovery_resource",
    )

    # overview with concrete values: baseline + 1 nvidia node (8) + 1 intel node (4, also via DRA)
    async def ov() -> dict[str, Any]:
        r = await lens.request("GET", "/api/cluster/overview", params={"clusterId": cid})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    base = (await ov())["kubernetes"]["hardware"]
    [nv] = await make_gpu_nodes(1, gpus=8)
    intel = f"t-intel-{cid}"
    await _intel_node(core, intel, 4)
    try:
        await wait_nodes_ready(kube_api, [intel], lambda _m: None, timeout=60)
        await kube_api.call_api(
            "/apis/resource.k8s.io/v1/resourceslices",
            "POST",
            header_params={"Content-Type": "application/json"},
            body={
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{intel}-gpu"},
                "spec": {
                    "driver": "gpu.intel.com",
                    "nodeName": intel,
                    "pool": {"name": intel, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"card{i}"} for i in range(4)],
                },
            },
            auth_settings=["BearerToken"],
        )
        pod = {
            "metadata": {"name": "gpu-user"},
            "spec": {
                "nodeName": nv,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            },
        }
        await _default_service_account(core, namespace)  # pods are refused until it exists
        await core.create_namespaced_pod(namespace, pod)
        deploy = {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"nodeName": "cpu-node-0", "containers": [{"name": "c", "image": "x"}]},
                },
            },
        }
        await apps.create_namespaced_deployment(namespace, deploy)
        plugin = {
            "metadata": {"name": "nvidia-device-plugin-daemonset"},
            "spec": {
                "selector": {"matchLabels": {"app": "nvdp"}},
                "template": {
                    "metadata": {"labels": {"app": "nvdp"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": nv},
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "c", "image": "x"}],
                    },
                },
            },
        }
        await apps.create_namespaced_daemon_set(namespace, plugin)
        result = await poll(
            ov,
            lambda o: (
                any(ns["name"] == namespace and ns["ready"] == 1 for ns in o["kubernetes"]["namespaces"])
                and o["kubernetes"]["hardware"]["allocatedGpuCount"] == base["allocatedGpuCount"] + 2
                and o["kubernetes"]["components"]["nvidiaDevicePlugin"]["status"] == "ready"
            ),
        )
        k = result["kubernetes"]
        by_name = {n["name"]: n for n in k["nodes"]}
        assert by_name[nv] | {"cachedImages": None} == {
            "name": nv,
            "version": by_name[nv]["version"],
            "osImage": by_name[nv]["osImage"],
            "ready": True,
            "schedulingDisabled": False,
            "cpu": 96.0,
            "gpu": True,
            "gpuCount": 8,
            "gpuByProfile": {"nvidia": 8},
            "vramBytes": 8 * 81559 * 1024 * 1024,
            "role": "worker",
            "cachedImages": None,
        }
        assert by_name[intel]["gpuByProfile"] == {"intel-xpu": 4} and by_name[intel]["gpuCount"] == 4
        hw = k["hardware"]
        nvidia_before = next((a["gpuCount"] for a in base["accelerators"] if a["id"] == "nvidia"), 0)
        assert hw["accelerators"] == [
            {"id": "intel-xpu", "gpuCount": 4},
            {"id": "nvidia", "gpuCount": nvidia_before + 8},
        ]
        assert hw["nodes"] == base["nodes"] + 2 and hw["gpuNodes"] == base["gpuNodes"] + 2
        assert hw["totalGpuCount"] == hw["gpuCount"] == base["gpuCount"] + 12
        assert hw["usableGpuCount"] == base["usableGpuCount"] + 12
        assert hw["availableGpuCount"] == base["availableGpuCount"] + 12 - 2
        assert hw["cpuCores"] == base["cpuCores"] + 96 + 96
        # kwok has no kubelet Summary API and no Prometheus is configured: unknown, not zero.
        for key in (
            "diskBytes",
            "diskUsedBytes",
            "diskAvailableBytes",
            "diskUsagePercent",
            "memoryUsagePercent",
            "memoryAvailableBytes",
        ):
            assert hw[key] is None
        [ns_entry] = [n for n in k["namespaces"] if n["name"] == namespace]
        assert ns_entry == {
            "name": namespace,
            "deployments": [{"name": "web", "desired": 1, "ready": 1, "available": 1}],
            "ready": 1,
        }
        assert k["components"]["nvidiaDevicePlugin"] == {
            "installed": True,
            "ready": 1,
            "desired": 1,
            "status": "ready",
        }
        assert k["components"]["intelDevicePlugin"] == {
            "installed": False,
            "ready": 0,
            "desired": 0,
            "status": "missing",
        }
        assert result["cluster"]["id"] == cid and result["fetchedAt"].endswith("Z")
    finally:
        await kube_api.call_api(
            f"/apis/resource.k8s.io/v1/resourceslices/{intel}-gpu", "DELETE", auth_settings=["BearerToken"]
        )
        await core.delete_node(intel)
    # The overview follows node deletions too (its node cache is a watch, not a snapshot).
    await poll(ov, lambda o: intel not in {n["name"] for n in o["kubernetes"]["nodes"]})

    # delete (the deployment above is not Lens's, so it does not block)
    gw_ns = f"custom-{cid}"
    await core.create_namespace({"metadata": {"name": gw_ns}})
    assert (await lens.request("DELETE", f"/api/cluster/clusters/{cid}")).status_code == 204
    ns = await core.read_namespace(gw_ns)
    assert ns.metadata.deletion_timestamp is not None  # gateway namespace is being removed
    assert (await lens.request("GET", "/api/cluster/clusters")).json()["items"] == []
    problem(
        await lens.request("GET", "/api/cluster/session", params={"clusterId": cid}), 404, "cluster_not_found"
    )
    problem(
        await lens.request("GET", f"/api/cluster/sessions/{sid}/planning-discovery/version"),
        404,
        "cluster_session_inactive",
    )


async def test_registration_errors(make_lens: MakeLens, unreachable_kubeconfig: bytes) -> None:
    lens = await make_lens()
    url = "/api/cluster/clusters"

    async def post(data: dict[str, str], kubeconfig: bytes | None = unreachable_kubeconfig) -> Any:
        files = {"file": ("kc", kubeconfig)} if kubeconfig is not None else None
        return await lens.request("POST", url, data=data, files=files)

    body = problem(await post({"name": "x"}, b"\xff\xfe\x00"), 422, "invalid_kubeconfig")
    assert "UTF-8" in body["detail"]
    problem(await post({"name": "x"}, b"clusters: [unclosed"), 422, "invalid_kubeconfig")
    exec_user = yaml.safe_load(unreachable_kubeconfig)
    exec_user["users"][0]["user"] = {
        "exec": {"command": "/bin/sh", "apiVersion": "client.authentication.k8s.io/v1"}
    }
    problem(await post({"name": "x"}, yaml.safe_dump(exec_user).encode()), 422, "invalid_kubeconfig")
    problem(await post({"name": "x"}, None), 422, "invalid_kubeconfig")
    problem(await post({"name": "x", "proxy": "{nope"}), 422, "invalid_proxy_config")
    problem(await post({"name": "x", "proxy": '{"mode":"custom"}'}), 422, "invalid_proxy_config")
    problem(await post({"name": "x", "gatewayPort": "80"}), 422, "invalid_gateway_port")
    problem(await post({"name": "x", "gatewayPort": "abc"}), 422, "invalid_gateway_port")
    problem(await post({"name": "x", "gatewayProvider": "nginx"}), 422, "invalid_gateway_provider")
    problem(
        await post({"name": "x", "inotifyMaxUserInstances": "1"}), 422, "invalid_inotify_max_user_instances"
    )
    problem(await post({"name": "  "}), 422, "invalid_cluster_name")
    problem(await post({"name": "x", "colour": "blue"}), 422, "invalid_form_field")
    problem(await post({"name": "x", "draft": "maybe"}), 422, "invalid_form_field")
    json_body = await lens.request("POST", url, json={"name": "x"})
    problem(json_body, 422, "invalid_form")
    assert (await lens.request("GET", "/api/cluster/clusters", params={"includeDrafts": "true"})).json()[
        "items"
    ] == []

    first = await lens.register("Prod", unreachable_kubeconfig)
    problem(await post({"name": "prod"}), 409, "cluster_name_conflict")
    draft = await lens.register("PROD", unreachable_kubeconfig, draft="true")  # drafts may share a name
    assert draft["cluster"]["draft"] is True and draft["sessionId"]
    items = (await lens.request("GET", "/api/cluster/clusters")).json()["items"]
    assert [c["id"] for c in items] == [first["cluster"]["id"]]
    with_drafts = (
        await lens.request("GET", "/api/cluster/clusters", params={"includeDrafts": "true"})
    ).json()["items"]
    assert {c["id"] for c in with_drafts} == {first["cluster"]["id"], draft["cluster"]["id"]}
    did = draft["cluster"]["id"]
    problem(
        await lens.request("PATCH", f"/api/cluster/clusters/{did}", json={"draft": False}),
        409,
        "cluster_name_conflict",
    )

    # PATCH errors
    cid = first["cluster"]["id"]
    problem(
        await lens.request("PATCH", f"/api/cluster/clusters/{cid}", json={"colour": "x"}),
        422,
        "unprocessable",
    )
    problem(
        await lens.request("PATCH", f"/api/cluster/clusters/{cid}", json={"gatewayPort": 1}),
        422,
        "invalid_gateway_port",
    )
    problem(
        await lens.request("PATCH", f"/api/cluster/clusters/{cid}", json={"proxy": {"mode": "x"}}),
        422,
        "invalid_proxy_config",
    )
    problem(
        await lens.request("PATCH", f"/api/cluster/clusters/{cid}", json={"gatewayNamespace": "UPPER"}),
        422,
        "invalid_gateway_namespace",
    )
    problem(
        await lens.request("PATCH", "/api/cluster/clusters/deadbeef", json={"name": "y"}),
        404,
        "cluster_not_found",
    )
    problem(await lens.request("DELETE", "/api/cluster/clusters/deadbeef"), 404, "cluster_not_found")
    problem(
        await lens.request("GET", "/api/cluster/overview", params={"clusterId": "deadbeef"}),
        404,
        "cluster_not_found",
    )
    problem(
        await lens.request(
            "GET", "/api/cluster/sessions/00000000-0000-0000-0000-000000000000/planning-discovery/nodes"
        ),
        404,
        "cluster_session_inactive",
    )


async def test_unreachable_cluster_failure_paths(
    make_lens: MakeLens, unreachable_kubeconfig: bytes, silent_server: str
) -> None:
    lens = await make_lens(probe_timeout_s=1.0, request_timeout_s=1.0)
    cid = (await lens.register("Gone", unreachable_kubeconfig))["cluster"]["id"]
    silent = (await lens.register("Silent", kubeconfig_with(silent_server)))["cluster"]["id"]
    t0 = time.monotonic()
    items = {c["id"]: c for c in (await lens.request("GET", "/api/cluster/clusters")).json()["items"]}
    assert time.monotonic() - t0 < 3.0  # probes run concurrently and are bounded
    assert (items[cid]["ready"], items[cid]["reason"]) == (False, "unreachable")
    assert (items[silent]["ready"], items[silent]["reason"]) == (False, "unreachable")
    version = (await lens.request("GET", f"/api/cluster/clusters/{cid}/kubernetes-version")).json()
    assert version == {"reachable": False, "version": None, "min_k8s_version": "v1.32.0", "supported": False}
    problem(
        await lens.request("GET", "/api/cluster/overview", params={"clusterId": cid}),
        502,
        "cluster_unreachable",
    )
    problem(
        await lens.request("GET", "/api/cluster/overview", params={"clusterId": silent}),
        504,
        "kubectl_timeout",
    )
    sid = (await lens.request("GET", "/api/cluster/session", params={"clusterId": cid})).json()["sessionId"]
    assert (await lens.request("GET", f"/api/cluster/sessions/{sid}/planning-discovery/nodes")).json() == {
        "result": None
    }
    # Deleting needs the gateway namespace cleanup: it fails, and the record stays for a retry.
    problem(
        await lens.request("DELETE", f"/api/cluster/clusters/{cid}"), 502, "cluster_gateway_cleanup_failed"
    )
    assert cid in {c["id"] for c in (await lens.request("GET", "/api/cluster/clusters")).json()["items"]}


async def test_version_too_old_and_unauthorized_reasons(
    make_lens: MakeLens, dev_kubeconfig: bytes, tmp_path: Path
) -> None:
    versions = yaml.safe_load((Path(__file__).parents[1] / "src/gpuplane_lens/versions.yaml").read_text())
    versions["min_k8s_version"] = "v1.99.0"
    path = tmp_path / "versions.yaml"
    path.write_text(yaml.safe_dump(versions))
    lens = await make_lens(versions_file=path)
    cid = (await lens.register("Old", dev_kubeconfig))["cluster"]["id"]
    doc = yaml.safe_load(dev_kubeconfig)
    server = doc["clusters"][0]["cluster"]["server"]
    bad = (await lens.register("BadCreds", kubeconfig_with(server, token="not-a-valid-token")))["cluster"][
        "id"
    ]
    items = {c["id"]: c for c in (await lens.request("GET", "/api/cluster/clusters")).json()["items"]}
    assert (items[cid]["ready"], items[cid]["reason"]) == (False, "version_unsupported")
    assert (items[bad]["ready"], items[bad]["reason"]) == (False, "unauthorized")
    version = (await lens.request("GET", f"/api/cluster/clusters/{cid}/kubernetes-version")).json()
    assert version == {"reachable": True, "version": "1.34", "min_k8s_version": "v1.99.0", "supported": False}
    assert (await lens.request("GET", "/api/v1/versions")).json()["min_k8s_version"] == "v1.99.0"


async def test_restart_keeps_clusters_and_sessions(
    make_lens: MakeLens, dev_kubeconfig: bytes, tmp_path: Path, database_url: str
) -> None:
    """Both stores: SQLite in the data dir, and PostgreSQL by DSN (the key file stays in the data dir)."""
    data_dir = tmp_path / "persistent"
    if database_url.startswith("sqlite"):
        database_url = f"sqlite:///{data_dir / 'lens.db'}"
    first = await make_lens(data_dir=data_dir, database_url=database_url)
    created = await first.register("Keep", dev_kubeconfig, inotifyMaxUserInstances=2048)
    cid, sid = created["cluster"]["id"], created["sessionId"]
    await first.request("PATCH", f"/api/cluster/clusters/{cid}", json={"gatewayNamespace": "gw"})
    await first.stop()

    second = await make_lens(data_dir=data_dir, database_url=database_url)
    [item] = (await second.request("GET", "/api/cluster/clusters")).json()["items"]
    assert (item["id"], item["ready"], item["inotifyMaxUserInstances"], item["gatewayNamespace"]) == (
        cid,
        True,
        2048,
        f"gw-{cid}",
    )
    assert (await second.request("GET", "/api/cluster/session", params={"clusterId": cid})).json()[
        "sessionId"
    ] == sid
    nodes = (await second.request("GET", f"/api/cluster/sessions/{sid}/planning-discovery/nodes")).json()
    assert nodes["result"]["items"]
    assert (
        await second.request("GET", "/api/cluster/overview", params={"clusterId": cid})
    ).status_code == 200


async def test_tokens_never_leak(
    make_lens: MakeLens,
    dev_kubeconfig: bytes,
    kube_api: Any,
    namespace: str,
    mint_token: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    rbac = client.RbacAuthorizationV1Api(kube_api)
    token = await mint_token(namespace, "lens-admin")
    binding = f"lens-admin-{namespace}"
    await rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "lens-admin", "namespace": namespace}],
        }
    )
    try:
        doc = yaml.safe_load(dev_kubeconfig)
        kubeconfig = kubeconfig_with(doc["clusters"][0]["cluster"]["server"], token=token)
        data_dir = tmp_path / "secret-lens"
        lens = await make_lens(data_dir=data_dir)
        hf = "hf_PlantedTokenValue_7f3a9c"
        cid = (await lens.register("Secretive", kubeconfig))["cluster"]["id"]
        await lens.request("GET", "/api/cluster/clusters")
        sid = (await lens.request("GET", "/api/cluster/session", params={"clusterId": cid})).json()[
            "sessionId"
        ]
        await lens.request("GET", "/api/cluster/overview", params={"clusterId": cid})
        await lens.request("GET", f"/api/cluster/sessions/{sid}/planning-discovery/nodes")
        created = await lens.request(
            "POST",
            f"/api/cluster/clusters/{cid}/hf-token-secrets",
            json={"namespace": namespace, "name": "hf-token", "token": hf},
        )
        assert created.status_code == 200, created.text
        await lens.request("PUT", f"/api/cluster/clusters/{cid}/hf-token-secret", json={"token": hf + "2"})
        await lens.request("PATCH", f"/api/cluster/clusters/{cid}", json={"description": "x"})
        await lens.request("GET", "/api/cluster/model-secrets", params={"clusterId": cid})
        await lens.request("GET", f"/api/cluster/clusters/{cid}/kubernetes-version")
        await lens.request("GET", f"/api/cluster-overview/sessions/{sid}")
        await lens.request("GET", "/openapi.json")
        assert all(r.status_code < 500 for r in lens.responses)
        await lens.stop()

        planted = [token, hf, base64.b64encode(hf.encode()).decode(), token.split(".")[1]]
        for resp in lens.responses:
            text = resp.text + str(resp.headers)
            assert not any(p in text for p in planted), resp.request.url
        for f in data_dir.rglob("*"):  # the DB, its WAL, the key file and anything else Lens wrote
            if f.is_file():
                blob = f.read_bytes()
                assert not any(p.encode() in blob for p in planted), f
        logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
        assert caplog.records  # the app did log
        assert not any(p in logged for p in planted)
    finally:
        await rbac.delete_cluster_role_binding(binding)


async def test_gateway_port_check_and_port_in_use(
    make_lens: MakeLens, dev_kubeconfig: bytes, kube_api: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    svc = await core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "taken"},
            "spec": {"type": "NodePort", "selector": {"a": "b"}, "ports": [{"port": 80}]},
        },
    )
    used = svc.spec.ports[0].node_port
    lens = await make_lens()
    cid = (await lens.register("Ports", dev_kubeconfig))["cluster"]["id"]
    url = f"/api/cluster/clusters/{cid}/gateway-port-check"
    taken = (await lens.request("GET", url, params={"port": used})).json()
    assert taken["available"] is False and taken["owner"] == f"{namespace}/taken" and taken["reason"]
    others = {
        p.node_port for s in (await core.list_service_for_all_namespaces()).items for p in s.spec.ports or []
    }
    free = next(p for p in range(32767, 30000, -1) if p not in others)
    assert (await lens.request("GET", url, params={"port": free})).json() == {
        "available": True,
        "owner": None,
    }
    low = (await lens.request("GET", url, params={"port": 8080})).json()
    assert low["available"] is False and low["owner"] is None
    problem(await lens.request("GET", url, params={"port": "abc"}), 422, "invalid_gateway_port")

    problem(
        await lens.request(
            "POST",
            "/api/cluster/clusters",
            data={"name": "Clash", "gatewayPort": str(used)},
            files={"file": ("kc", dev_kubeconfig)},
        ),
        422,
        "gateway_port_in_use",
    )
    names = {c["name"] for c in (await lens.request("GET", "/api/cluster/clusters")).json()["items"]}
    assert names == {"Ports"}  # the refused registration left nothing behind
    patch = f"/api/cluster/clusters/{cid}"
    problem(await lens.request("PATCH", patch, json={"gatewayPort": used}), 422, "gateway_port_in_use")
    ok = await lens.request("PATCH", patch, json={"gatewayPort": free})
    assert ok.json()["cluster"]["gatewayPort"] == free


async def test_legacy_overview_sessions(make_lens: MakeLens, unreachable_kubeconfig: bytes) -> None:
    lens = await make_lens()
    created = await lens.register("Legacy", unreachable_kubeconfig)
    cid, sid = created["cluster"]["id"], created["sessionId"]
    got = (await lens.request("GET", f"/api/cluster-overview/sessions/{sid}")).json()
    assert got | {"createdAt": None} == {"id": sid, "serverId": cid, "createdAt": None, "status": "connected"}
    assert (await lens.request("POST", f"/api/cluster-overview/sessions/{sid}/disconnect")).status_code == 204
    problem(
        await lens.request("GET", f"/api/cluster-overview/sessions/{sid}"), 404, "cluster_session_inactive"
    )
    problem(
        await lens.request("POST", f"/api/cluster-overview/sessions/{sid}/disconnect"),
        404,
        "cluster_session_inactive",
    )
    problem(
        await lens.request("GET", f"/api/cluster/sessions/{sid}/planning-discovery/version"),
        404,
        "cluster_session_inactive",
    )
    fresh = (await lens.request("GET", "/api/cluster/session", params={"clusterId": cid})).json()["sessionId"]
    assert fresh != sid


async def test_key_rotation_on_restart(
    make_lens: MakeLens, unreachable_kubeconfig: bytes, tmp_path: Path
) -> None:
    from cryptography.fernet import Fernet

    data_dir = tmp_path / "rotating"
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    first = await make_lens(data_dir=data_dir, encryption_keys=[old], probe_timeout_s=1.0)
    cid = (await first.register("Rotate", unreachable_kubeconfig))["cluster"]["id"]
    await first.stop()
    assert not (data_dir / "lens.key").exists()  # a configured key means no key file

    rotating = await make_lens(data_dir=data_dir, encryption_keys=[new, old], probe_timeout_s=1.0)
    await rotating.stop()  # start-up re-encrypted the row under the new key
    after = await make_lens(data_dir=data_dir, encryption_keys=[new], probe_timeout_s=1.0)
    [item] = (await after.request("GET", "/api/cluster/clusters")).json()["items"]
    assert (item["id"], item["reason"]) == (cid, "unreachable")  # the kubeconfig decrypted fine
    await after.stop()
    # Keys that cannot read the stored rows stop the start-up instead of serving broken clusters.
    with pytest.raises(InternalError, match="cannot be decrypted"):
        await make_lens(data_dir=data_dir, encryption_keys=[Fernet.generate_key().decode()])


async def test_draft_delete_fails_when_gateway_cleanup_fails(
    make_lens: MakeLens, unreachable_kubeconfig: bytes
) -> None:
    lens = await make_lens(request_timeout_s=1.0)
    cid = (await lens.register("Draft gone", unreachable_kubeconfig, draft="true"))["cluster"]["id"]
    body = problem(
        await lens.request("DELETE", f"/api/cluster/clusters/{cid}"), 502, "cluster_gateway_cleanup_failed"
    )
    assert f"lens-gateway-{cid}" in body["detail"]
    listed = (await lens.request("GET", "/api/cluster/clusters", params={"includeDrafts": "true"})).json()[
        "items"
    ]
    assert [c["id"] for c in listed] == [cid]


async def test_cordon_and_uncordon(
    make_lens: MakeLens, dev_kubeconfig: bytes, kube_api: Any, make_gpu_nodes: Any
) -> None:
    core = client.CoreV1Api(kube_api)
    names = await make_gpu_nodes(2)
    lens = await make_lens()
    cid = (await lens.register("Cordon", dev_kubeconfig))["cluster"]["id"]
    resp = await lens.request("POST", f"/api/cluster/clusters/{cid}/nodes/cordon", json={"names": names})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"items": [{"name": n, "unschedulable": True, "ready": True} for n in names]}
    for n in names:
        assert (await core.read_node(n)).spec.unschedulable

    async def ov() -> dict[str, Any]:
        body: dict[str, Any] = (
            await lens.request("GET", "/api/cluster/overview", params={"clusterId": cid})
        ).json()
        return body

    await poll(
        ov, lambda o: all(n["schedulingDisabled"] for n in o["kubernetes"]["nodes"] if n["name"] in names)
    )
    resp = await lens.request(
        "POST", f"/api/cluster/clusters/{cid}/nodes/uncordon", json={"names": names[:1]}
    )
    assert resp.json()["items"] == [{"name": names[0], "unschedulable": False, "ready": True}]
    assert not (await core.read_node(names[0])).spec.unschedulable
    assert (await core.read_node(names[1])).spec.unschedulable
    # A typo changes nothing.
    problem(
        await lens.request(
            "POST", f"/api/cluster/clusters/{cid}/nodes/uncordon", json={"names": [names[1], "no-such-node"]}
        ),
        404,
        "node_not_found",
    )
    assert (await core.read_node(names[1])).spec.unschedulable
    for body in ({"names": []}, {}, {"names": ["Bad Name"]}):
        problem(
            await lens.request("POST", f"/api/cluster/clusters/{cid}/nodes/cordon", json=body),
            422,
            "invalid_node_names",
        )


@pytest.mark.slow  # restarts the shared apiserver: not for the default run
async def test_overview_survives_an_apiserver_restart(
    make_lens: MakeLens, dev_kubeconfig: bytes, devcluster: Any, make_gpu_nodes: Any
) -> None:
    """The overview's node watch breaks with the apiserver, then resumes (or relists)."""
    lens = await make_lens()
    cid = (await lens.register("Restart", dev_kubeconfig))["cluster"]["id"]

    async def ov() -> dict[str, Any]:
        r = await lens.request("GET", "/api/cluster/overview", params={"clusterId": cid})
        body: dict[str, Any] = r.json() if r.status_code == 200 else {"kubernetes": {"nodes": []}}
        return body

    assert (await ov())["kubernetes"]["nodes"]
    await asyncio.to_thread(devcluster.restart_component, "kube-apiserver")
    [fresh] = await make_gpu_nodes(1)
    seen = await poll(ov, lambda o: fresh in {n["name"] for n in o["kubernetes"]["nodes"]}, timeout=90)
    assert {"gpu-node-0", "gpu-node-1"} <= {n["name"] for n in seen["kubernetes"]["nodes"]}
