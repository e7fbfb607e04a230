"""One table over every authenticated endpoint and every kind of bad credential.

Endpoints: the hypervisor limiter endpoints (`GET /api/v1/pod?container_name=`,
`POST /api/v1/process`) and the controller component endpoints (`GET /api/connection`,
`POST /api/assign-host-port`, `GET /api/assign-index`), all checked with a real TokenReview
against the devcluster apiserver.

Credentials: none, garbage, expired, wrong audience, bound to a deleted pod, of a deleted
ServiceAccount, bound to a pod deleted after the token was used (and cached), of another
(valid) pod, and the right pod. Every credential that is not valid
is answered 401 with the `{"error"}` shape; a valid token of the wrong pod never gets the right
pod's answer (401 for a connection it does not own and for the controller-only assignments,
404 on the hypervisor, where that pod has no allocation); the right pod gets 200.

"Expired": TokenRequest refuses lifetimes under 600 s and the apiserver has no switch to
shorten that (`--service-account-max-token-expiration` only caps the maximum), so the expired
token is the right pod's real token re-signed with the cluster's ServiceAccount signing key and
an `exp` one hour in the past. The same re-signing with a future `exp` is accepted (the
`forged-valid` control row), so expiry is the only reason the expired one is refused.

"Revoked after use": successful reviews are cached by the services (hypervisor
`review_cache_seconds`, default 60 s; controller `token_review_ttl_seconds`, default 60 s) and
by kube-apiserver itself (10 s), so a used token outlives its pod by up to their sum. The test
shortens the services' caches to 2 s and shows the token refused once both have expired.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from reliability_kit import LoggedService, service

from gpuplane_hypervisor.domain.models import Allocation, AllocationEvent, EventType, Resources
from gpuplane_hypervisor.main import build_app as build_hypervisor
from gpuplane_hypervisor.settings import Settings as HypervisorSettings

GIB = 1024**3
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
CONTROLLER_SA = "tf-controller"
BAD_CREDENTIALS = (
    "none",
    "garbage",
    "expired",
    "wrong-audience",
    "deleted-pod",
    "deleted-sa",
    "revoked-after-use",
)
# Successful reviews are cached (hash of the token -> identity) this long; a token whose pod is
# deleted after it was used keeps working until then. Short here so the row can show the bound.
REVIEW_CACHE_S = 2.0
# kube-apiserver caches successful token authentications itself, for 10 s.
APISERVER_TOKEN_CACHE_S = 10.0


def forge(token: str, signing_key: bytes, exp_in: int) -> str:
    """`token`'s header and claims re-signed with the cluster's key, expiring `exp_in` s from now."""
    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    now = int(time.time())
    issued = now + min(exp_in, 0) - 600
    claims.update(iat=issued, nbf=issued, exp=now + exp_in)
    return jwt.encode(claims, signing_key, algorithm=header["alg"], headers={"kid": header["kid"]})


async def make_pod(core: client.CoreV1Api, ns: str, name: str, sa: str, **extra: Any) -> Any:
    body: dict[str, Any] = {
        "metadata": {"name": name, **extra.pop("metadata", {})},
        "spec": {
            "nodeName": "gpu-node-0",
            "serviceAccountName": sa,
            "tolerations": [TOLERATION],
            "containers": [{"name": "main", "image": "busybox", **extra.pop("container", {})}],
        },
    }
    return await core.create_namespaced_pod(ns, body)


async def wait_gone(read: Any, *args: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            await read(*args)
        except ApiException as e:
            if e.status == 404:
                return
            raise
        assert time.monotonic() < deadline, f"{args} not deleted in {timeout}s"
        await asyncio.sleep(0.1)


@dataclass
class World:
    namespace: str
    tokens: dict[str, str] = field(default_factory=dict)
    pods: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
async def world(devcluster: Any, kube_api: Any, namespace: str, mint_token: Any) -> World:
    """Pods, ServiceAccounts and tokens for every row; the "deleted" ones already deleted."""
    core = client.CoreV1Api(kube_api)
    w = World(namespace)
    for sa in ("workload", "gone", CONTROLLER_SA):
        await core.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})
    for name, sa in (
        ("right", "workload"),
        ("other", "workload"),
        ("doomed", "workload"),
        ("orphan", "gone"),
        ("ctl", CONTROLLER_SA),
        ("ctl-doomed", CONTROLLER_SA),
        ("revoked", "workload"),
        ("ctl-revoked", CONTROLLER_SA),
    ):
        w.pods[name] = await make_pod(core, namespace, name, sa)
    sign_key = await asyncio.to_thread(Path(devcluster.pki.sa_key).read_bytes)
    for who, sa in (("", "workload"), ("ctl-", CONTROLLER_SA)):
        right = await mint_token(namespace, sa, pod=w.pods[f"{who}right" if not who else "ctl"])
        w.tokens[f"{who}right"] = right
        w.tokens[f"{who}expired"] = forge(right, sign_key, exp_in=-3600)
        w.tokens[f"{who}forged-valid"] = forge(right, sign_key, exp_in=600)
        w.tokens[f"{who}wrong-audience"] = await mint_token(
            namespace, sa, pod=w.pods[f"{who}right" if not who else "ctl"], audiences=["not-gpuplane"]
        )
    w.tokens["other"] = await mint_token(namespace, "workload", pod=w.pods["other"])
    w.tokens["deleted-pod"] = await mint_token(namespace, "workload", pod=w.pods["doomed"])
    w.tokens["ctl-deleted-pod"] = await mint_token(namespace, CONTROLLER_SA, pod=w.pods["ctl-doomed"])
    w.tokens["deleted-sa"] = await mint_token(namespace, "gone", pod=w.pods["orphan"])
    w.tokens["revoked-after-use"] = await mint_token(namespace, "workload", pod=w.pods["revoked"])
    w.tokens["ctl-revoked-after-use"] = await mint_token(namespace, CONTROLLER_SA, pod=w.pods["ctl-revoked"])
    for pod in ("doomed", "ctl-doomed"):
        await core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
        await wait_gone(core.read_namespaced_pod, pod, namespace)
    await core.delete_namespaced_service_account("gone", namespace)
    await wait_gone(core.read_namespaced_service_account, "gone", namespace)
    return w


def allocation(pod: Any, uuids: list[str]) -> Allocation:
    meta = pod.metadata
    return Allocation(
        pod_uid=meta.uid,
        namespace=meta.namespace,
        pod_name=meta.name,
        gpu_names=tuple(f"gpu-{i}" for i in range(len(uuids))),
        gpu_uuids=tuple(uuids),
        request=Resources(tflops=100.0, vram=8 * GIB),
        limit=Resources(tflops=200.0, vram=16 * GIB),
        qos="medium",
        isolation="soft",
        gpu_count=len(uuids),
        workload="",
        pool="default",
    )


@pytest.fixture
async def hypervisor(
    devcluster: Any, world: World, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, int]]:
    """The hypervisor in-process, with allocations for `right` and for the pods whose token
    is refused only because their pod or ServiceAccount is gone (`other` has none here)."""
    settings = HypervisorSettings(
        node_name="gpu-node-0",
        backend="simulated",
        simulated_devices="2xH100-80GB",
        state_file=str(tmp_path / "state.json"),
        http_host="127.0.0.1",
        log_json=False,
        kubeconfig=str(devcluster.kubeconfig),
        # No kubelet cgroups here: the registered "container" process is matched by PID alone.
        pod_cgroup_check=False,
        review_cache_seconds=REVIEW_CACHE_S,
    )
    app = build_hypervisor(settings)
    worker = await asyncio.create_subprocess_exec("sleep", "120")
    try:
        async with app.router.lifespan_context(app):
            agent = app.state.agent
            uuids = list(agent.devices)
            agent.apply_event(AllocationEvent(EventType.RESET, 1))
            for name in ("right", "doomed", "orphan", "revoked"):
                alloc = allocation(world.pods[name], uuids[:1])
                agent.apply_event(AllocationEvent(EventType.ADDED, 1, alloc))
            agent.apply_event(AllocationEvent(EventType.SYNCED, 1))
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://hypervisor") as http:
                yield http, worker.pid
    finally:
        worker.kill()
        await worker.wait()


@pytest.fixture
async def controller(
    devcluster: Any, kube_api: Any, world: World, tmp_path: Path
) -> AsyncIterator[LoggedService]:
    """`tf-controller` (sole leader) allowing the namespace's `tf-controller` SA to assign, and a
    TensorFusionConnection owned by `right` whose worker pod is Running."""
    ns = world.namespace
    core = client.CoreV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    await make_pod(
        core,
        ns,
        "worker-0",
        "workload",
        metadata={"labels": {"tensor-fusion.ai/workload": "wl", "tensor-fusion.ai/component": "worker"}},
        container={"ports": [{"containerPort": 8000}]},
    )
    right = world.pods["right"].metadata
    await custom.create_namespaced_custom_object(
        "tensor-fusion.ai",
        "v1",
        ns,
        "tensorfusionconnections",
        {
            "apiVersion": "tensor-fusion.ai/v1",
            "kind": "TensorFusionConnection",
            "metadata": {
                "name": "conn",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "right", "uid": right.uid}],
            },
            "spec": {"workloadName": "wl", "clientPod": "right"},
        },
    )
    proc = service(
        "controller",
        devcluster.kubeconfig,
        tmp_path,
        GPUPLANE_CONTROLLER_LEADER_ELECT="false",
        GPUPLANE_CONTROLLER_LEASE_NAMESPACE=ns,
        GPUPLANE_CONTROLLER_COMPONENT_SERVICE_ACCOUNT=f"system:serviceaccount:{ns}:{CONTROLLER_SA}",
        GPUPLANE_CONTROLLER_CONNECTION_WAIT_TIMEOUT_S="10",
        GPUPLANE_CONTROLLER_TOKEN_REVIEW_TTL_SECONDS=str(REVIEW_CACHE_S),
        GPUPLANE_CONTROLLER_ASSIGNMENT_LEDGER=f"assign-{secrets.token_hex(3)}",
    )
    await asyncio.to_thread(proc.start)
    try:
        yield proc
    finally:
        await asyncio.to_thread(proc.stop)


@dataclass(frozen=True)
class Endpoint:
    service: str
    method: str
    path: str
    params: dict[str, str]
    # The principal whose token is "right" here, and what a valid token of another pod gets.
    right: str
    other_pod: int


ENDPOINTS = [
    Endpoint("hypervisor", "GET", "/api/v1/pod", {"container_name": "main"}, "right", 404),
    Endpoint("hypervisor", "POST", "/api/v1/process", {"container_name": "main"}, "right", 404),
    Endpoint("controller", "GET", "/api/connection", {"name": "conn"}, "right", 401),
    Endpoint("controller", "POST", "/api/assign-host-port", {"podName": "worker-1"}, "ctl-right", 401),
    Endpoint("controller", "GET", "/api/assign-index", {"podName": "worker-1"}, "ctl-right", 401),
]


def token_for(ep: Endpoint, credential: str, w: World) -> str | None:
    ctl = ep.right.startswith("ctl-")
    if credential == "none":
        return None
    if credential == "garbage":
        return "not.a-token." + secrets.token_urlsafe(24)
    if credential == "right":
        return w.tokens[ep.right]
    if credential == "another-pod":
        return w.tokens["other"]
    if credential == "deleted-sa":
        return w.tokens["deleted-sa"]
    return w.tokens[f"ctl-{credential}" if ctl else credential]


def expected(ep: Endpoint, credential: str) -> int:
    if credential in BAD_CREDENTIALS:
        return 401
    if credential == "another-pod":
        return ep.other_pod
    return 200


async def test_auth_matrix(
    world: World,
    hypervisor: tuple[httpx.AsyncClient, int],
    controller: LoggedService,
    kube_api: Any,
) -> None:
    hv_http, worker_pid = hypervisor
    custom = client.CustomObjectsApi(kube_api)
    # The connection must be Running before "right" can get its URL.
    deadline = time.monotonic() + 30
    while True:
        conn = await custom.get_namespaced_custom_object(
            "tensor-fusion.ai", "v1", world.namespace, "tensorfusionconnections", "conn"
        )
        if (conn.get("status") or {}).get("phase") == "Running":
            break
        assert time.monotonic() < deadline, f"connection never Running: {conn.get('status')}"
        await asyncio.sleep(0.2)

    # Revocation after use: the tokens work (and are cached), then their pods are deleted; once
    # the service's review cache and the apiserver's own token cache have expired they are
    # refused like any other dead token.
    ctl_headers = {"Authorization": f"Bearer {world.tokens['ctl-revoked-after-use']}"}
    async with httpx.AsyncClient(base_url=controller.url, timeout=30) as http:
        used = await http.get("/api/assign-index", params={"podName": "worker-2"}, headers=ctl_headers)
    assert used.status_code == 200, used.text
    hv_headers = {"Authorization": f"Bearer {world.tokens['revoked-after-use']}"}
    used = await hv_http.get("/api/v1/pod", params={"container_name": "main"}, headers=hv_headers)
    assert used.status_code == 200, used.text
    core = client.CoreV1Api(kube_api)
    for pod in ("revoked", "ctl-revoked"):
        await core.delete_namespaced_pod(pod, world.namespace, grace_period_seconds=0)
        await wait_gone(core.read_namespaced_pod, pod, world.namespace)
    await asyncio.sleep(REVIEW_CACHE_S + APISERVER_TOKEN_CACHE_S + 1.0)

    credentials = [*BAD_CREDENTIALS, "another-pod", "forged-valid", "right"]
    results: list[str] = []
    failures: list[str] = []
    async with httpx.AsyncClient(base_url=controller.url, timeout=30) as ctl_http:
        for ep in ENDPOINTS:
            http = hv_http if ep.service == "hypervisor" else ctl_http
            params = dict(ep.params)
            if ep.path == "/api/v1/process":
                params["container_pid"] = str(worker_pid)
            if ep.path == "/api/connection":
                params["namespace"] = world.namespace
            for credential in credentials:
                token = token_for(ep, credential, world)
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                resp = await http.request(ep.method, ep.path, params=params, headers=headers)
                want = expected(ep, credential)
                row = f"{ep.service:10} {ep.method:4} {ep.path:22} {credential:13} -> {resp.status_code}"
                results.append(row)
                ok = resp.status_code == want
                if resp.status_code >= 400:
                    body = resp.json()
                    ok = ok and set(body) == {"error"} and bool(body["error"])
                    ok = ok and (token is None or token not in resp.text)
                if not ok:
                    failures.append(f"{row} (want {want}): {resp.text[:200]}")
    print("\n".join(results))
    assert not failures, "\n".join(failures)


def test_forging_needs_the_cluster_key() -> None:
    """Sanity of the forging helper itself: the claims survive, only the times change."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    original = jwt.encode({"sub": "system:serviceaccount:a:b", "exp": 1}, pem, "RS256", headers={"kid": "k"})
    forged = forge(original, pem, exp_in=-3600)
    claims = jwt.decode(forged, key.public_key(), algorithms=["RS256"], options={"verify_exp": False})
    assert claims["sub"] == "system:serviceaccount:a:b" and claims["exp"] < time.time()
    assert jwt.get_unverified_header(forged)["kid"] == "k"
    assert os.path.basename(__file__).startswith("test_reliability_")
