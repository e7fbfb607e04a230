"""TokenReview-based authentication against the real apiserver."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from fastapi import Depends, FastAPI
from kubernetes_asyncio import client

from devcluster.cluster import SA_ISSUER, DevCluster
from gpuplane_core.auth import CachedReviewer, Identity, require_identity
from gpuplane_core.errors import Unauthorized
from gpuplane_core.http_errors import install_error_handlers
from gpuplane_core.k8s.tokenreview import KubeTokenReviewer

pytestmark = pytest.mark.cluster


async def _pod(kube_api: Any, namespace: str, name: str = "client", service_account: str = "default") -> Any:
    core = client.CoreV1Api(kube_api)
    if service_account != "default":
        await core.create_namespaced_service_account(namespace, body={"metadata": {"name": service_account}})
    spec = {"serviceAccountName": service_account, "containers": [{"name": "main", "image": "busybox"}]}
    return await core.create_namespaced_pod(namespace, body={"metadata": {"name": name}, "spec": spec})


def _app(reviewer: Any) -> FastAPI:
    app = FastAPI()
    app.state.token_reviewer = reviewer
    install_error_handlers(app, "simple")

    @app.get("/whoami")
    async def whoami(ident: Identity = Depends(require_identity)) -> dict[str, Any]:
        return {"user": ident.username, "podUID": ident.pod_uid, "podName": ident.pod_name}

    return app


def _claims(namespace: str, **over: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {
        "iss": SA_ISSUER,
        "aud": [SA_ISSUER],
        "sub": f"system:serviceaccount:{namespace}:default",
        "iat": now - 7200,
        "nbf": now - 7200,
        "exp": now - 3600,
        "kubernetes.io": {
            "namespace": namespace,
            "serviceaccount": {"name": "default", "uid": str(uuid.uuid4())},
        },
    }
    claims.update(over)
    return claims


async def test_pod_bound_token_identifies_the_pod(kube_api: Any, namespace: str, mint_token: Any) -> None:
    pod = await _pod(kube_api, namespace, service_account="worker")
    token = await mint_token(namespace, "worker", pod=pod)
    ident = await KubeTokenReviewer(kube_api).review(token)
    assert ident.username == f"system:serviceaccount:{namespace}:worker"
    assert ident.service_account == (namespace, "worker")
    assert ident.pod_uid == pod.metadata.uid
    assert ident.pod_name == "client"


async def test_http_dependency_accepts_valid_and_rejects_bad_tokens(
    kube_api: Any, namespace: str, mint_token: Any, devcluster: DevCluster
) -> None:
    pod = await _pod(kube_api, namespace)
    good = await mint_token(namespace, pod=pod)
    # Properly signed with the cluster's real ServiceAccount key, but expired an hour ago.
    sa_key = devcluster.pki.sa_key.read_bytes() if devcluster.pki else b""
    expired = jwt.encode(_claims(namespace), sa_key, algorithm="ES256")
    # Valid claims, but signed by a key the apiserver does not trust.
    forged = jwt.encode(
        _claims(namespace, exp=int(time.time()) + 3600),
        ec.generate_private_key(ec.SECP256R1()),
        algorithm="ES256",
    )
    app = _app(CachedReviewer(KubeTokenReviewer(kube_api)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        ok = await http.get("/whoami", headers={"Authorization": f"Bearer {good}"})
        assert ok.status_code == 200
        assert ok.json()["podUID"] == pod.metadata.uid
        cases = {
            "missing": {},
            "not bearer": {"Authorization": f"Basic {good}"},
            "garbage": {"Authorization": "Bearer not-a-token"},
            "forged": {"Authorization": f"Bearer {forged}"},
            "expired": {"Authorization": f"Bearer {expired}"},
        }
        for case, headers in cases.items():
            r = await http.get("/whoami", headers=headers)
            assert r.status_code == 401, case
            assert set(r.json()) == {"error"}, case
            assert good not in r.text


async def test_wrong_audience_is_rejected(kube_api: Any, namespace: str, mint_token: Any) -> None:
    token = await mint_token(namespace, audiences=["some-other-service"])
    with pytest.raises(Unauthorized):
        await KubeTokenReviewer(kube_api).review(token)
    ident = await KubeTokenReviewer(kube_api, audiences=["some-other-service"]).review(token)
    assert ident.service_account == (namespace, "default")


async def test_token_of_deleted_pod_is_rejected(kube_api: Any, namespace: str, mint_token: Any) -> None:
    pod = await _pod(kube_api, namespace, "short-lived")
    token = await mint_token(namespace, pod=pod)
    reviewer = KubeTokenReviewer(kube_api)
    assert (await reviewer.review(token)).pod_uid == pod.metadata.uid
    await client.CoreV1Api(kube_api).delete_namespaced_pod("short-lived", namespace, grace_period_seconds=0)
    deadline = time.monotonic() + 30
    while True:
        try:
            await reviewer.review(token)
        except Unauthorized:
            break
        assert time.monotonic() < deadline, "token of a deleted pod still accepted"
        await asyncio.sleep(0.2)


async def test_cache_shares_reviews_and_never_keeps_raw_tokens(
    kube_api: Any, namespace: str, mint_token: Any
) -> None:
    token = await mint_token(namespace)

    class Counting:
        def __init__(self) -> None:
            self.calls = 0
            self.inner = KubeTokenReviewer(kube_api)

        async def review(self, t: str) -> Identity:
            self.calls += 1
            return await self.inner.review(t)

    counting = Counting()
    cached = CachedReviewer(counting, ttl=60)

    idents = await asyncio.gather(*(cached.review(token) for _ in range(20)))
    assert {i.username for i in idents} == {f"system:serviceaccount:{namespace}:default"}
    assert counting.calls == 1
    assert token not in repr(cached.__dict__)
