"""pytest fixtures backed by a real devcluster control plane.

- `devcluster`: one cluster per test session (started warm in seconds once
  the binaries are built), stopped at the end unless GPUPLANE_KEEP_DEVCLUSTER=1.
- `kube_api`: a kubernetes_asyncio ApiClient with admin rights.
- `namespace`: a fresh namespace per test, deleted afterwards.
- `mint_token`: ServiceAccount tokens via the TokenRequest API, optionally
  bound to a pod (so a TokenReview reports that pod's name and UID).
- `make_gpu_nodes`: extra kwok GPU nodes for one test, removed afterwards.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from devcluster.cluster import DevCluster

TEST_CLUSTER = os.environ.get("GPUPLANE_TEST_CLUSTER", "pytest")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "devcluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def devcluster() -> Iterator[DevCluster]:
    cluster = DevCluster(TEST_CLUSTER)
    cluster.up(
        gpu_nodes=int(os.environ.get("GPUPLANE_TEST_GPU_NODES", "2")),
        gpus_per_node=8,
        gpu_model="H100",
        cpu_nodes=1,
    )
    yield cluster
    if os.environ.get("GPUPLANE_KEEP_DEVCLUSTER") != "1":
        cluster.down()


@pytest.fixture
async def kube_api(devcluster: DevCluster) -> AsyncIterator[Any]:
    from devcluster.k8s_ops import api_client

    api = await api_client(devcluster.kubeconfig)
    try:
        yield api
    finally:
        await api.close()


def _slug(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-") or "t"


@pytest.fixture
async def namespace(kube_api: Any, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    from devcluster.k8s_ops import wait_default_serviceaccount

    name = f"t-{_slug(request.node.name, 45)}-{secrets.token_hex(3)}"
    core = client.CoreV1Api(kube_api)
    await core.create_namespace(
        body={"metadata": {"name": name, "labels": {"devcluster.gpuplane.io/test": "true"}}}
    )
    # Pods are refused until kube-controller-manager has created the namespace's `default`
    # ServiceAccount: hand out the namespace only once it is usable.
    await wait_default_serviceaccount(kube_api, namespace=name)
    yield name
    try:
        await core.delete_namespace(name)
    except ApiException as e:
        if e.status != 404:
            raise


MintToken = Callable[..., Awaitable[str]]


@pytest.fixture
def mint_token(kube_api: Any) -> MintToken:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    core = client.CoreV1Api(kube_api)

    async def mint(
        namespace: str,
        service_account: str = "default",
        *,
        pod: Any | None = None,
        audiences: list[str] | None = None,
        expiration_seconds: int = 600,
    ) -> str:
        """A real token for `namespace/service_account`; bound to `pod` (V1Pod or dict) if given."""
        try:
            await core.create_namespaced_service_account(
                namespace, body={"metadata": {"name": service_account}}
            )
        except ApiException as e:
            if e.status != 409:
                raise
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences is not None:
            spec["audiences"] = audiences
        if pod is not None:
            meta = pod["metadata"] if isinstance(pod, dict) else pod.metadata.to_dict()
            spec["boundObjectRef"] = {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta["name"],
                "uid": meta["uid"],
            }
        resp = await core.create_namespaced_service_account_token(
            service_account, namespace, body={"spec": spec}
        )
        return str(resp.status.token)

    return mint


@pytest.fixture
async def make_gpu_nodes(kube_api: Any) -> AsyncIterator[Callable[..., Awaitable[list[str]]]]:
    from kubernetes_asyncio import client

    from devcluster.k8s_ops import create_node, wait_nodes_ready
    from devcluster.nodes import NodeShape, gpu_node

    core = client.CoreV1Api(kube_api)
    created: list[str] = []

    async def make(
        count: int,
        *,
        gpus: int = 8,
        model: str = "H100",
        labels: dict[str, str] | None = None,
        wait_ready: bool = True,
    ) -> list[str]:
        prefix = f"t-{secrets.token_hex(3)}"
        names = [f"{prefix}-{i}" for i in range(count)]
        shape = NodeShape(gpus=gpus, model=model)
        for n in names:
            await create_node(core, gpu_node(n, shape, labels))
            created.append(n)
        if wait_ready:
            await wait_nodes_ready(kube_api, names, lambda _m: None, timeout=60)
        return names

    yield make
    for n in created:
        await core.delete_node(n)
