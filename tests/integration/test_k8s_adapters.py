"""The client factory and error translation against the real apiserver."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from devcluster.cluster import DevCluster
from gpuplane_core.errors import Conflict, NotFound, Unprocessable
from gpuplane_core.k8s.client import load_api_client
from gpuplane_core.k8s.errors import k8s_errors

pytestmark = pytest.mark.cluster


async def test_client_from_kubeconfig_and_env(
    devcluster: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    explicit = await load_api_client(str(devcluster.kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(devcluster.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    from_env = await load_api_client()
    try:
        for api in (explicit, from_env):
            assert (await client.VersionApi(api).get_code()).minor == "34"
    finally:
        await explicit.close()
        await from_env.close()


async def test_real_api_errors_are_translated(kube_api: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    with pytest.raises(NotFound, match="configmap cm"):
        async with k8s_errors("configmap cm"):
            await core.read_namespaced_config_map("cm", namespace)
    await core.create_namespaced_config_map(namespace, body={"metadata": {"name": "cm"}})
    with pytest.raises(Conflict, match="already exists"):
        async with k8s_errors():
            await core.create_namespaced_config_map(namespace, body={"metadata": {"name": "cm"}})
    with pytest.raises(Unprocessable, match="Invalid value"):
        async with k8s_errors():
            await core.create_namespaced_config_map(namespace, body={"metadata": {"name": "Not_A_Name"}})
