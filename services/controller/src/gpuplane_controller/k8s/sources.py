"""List functions for the informers that yield plain camelCase dicts (no model
deserialisation: faster, and the same shape for core and custom objects)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client

from gpuplane_core.k8s.raw import list_json

GROUP, VERSION = "tensor-fusion.ai", "v1"
ListFn = Callable[..., Awaitable[Any]]


def nodes(api: client.ApiClient) -> ListFn:
    return list_json(client.CoreV1Api(api).list_node)


def pods(api: client.ApiClient) -> ListFn:
    return list_json(client.CoreV1Api(api).list_pod_for_all_namespaces)


def cluster_custom(api: client.ApiClient, plural: str) -> ListFn:
    custom = client.CustomObjectsApi(api)

    async def list_custom(**kw: Any) -> Any:
        return await custom.list_cluster_custom_object(GROUP, VERSION, plural, **kw)

    return list_json(list_custom)


def all_namespaces_custom(api: client.ApiClient, plural: str) -> ListFn:
    # GPUResourceQuota is namespaced; listing the cluster-scoped path returns every namespace.
    return cluster_custom(api, plural)
