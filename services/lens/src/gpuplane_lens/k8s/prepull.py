"""The image prepull DaemonSet on a managed cluster."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from gpuplane_core.errors import NotFound
from gpuplane_lens.domain import prepull as domain
from gpuplane_lens.k8s.clients import list_items, request_json
from gpuplane_lens.k8s.secrets import FIELD_MANAGER, ensure_namespace


async def start(
    api: client.ApiClient, namespace: str, images: list[str], helper_image: str, timeout: float
) -> dict[str, Any]:
    await ensure_namespace(api, namespace, timeout)
    name = domain.DAEMONSET_PREFIX
    body = domain.daemonset(name, namespace, images, helper_image)
    await request_json(
        api,
        "PATCH",
        f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}",
        query={"fieldManager": FIELD_MANAGER, "force": "true"},
        body=body,
        content_type="application/apply-patch+yaml",
        timeout=timeout,
    )
    return await status(api, namespace, timeout)


async def status(api: client.ApiClient, namespace: str, timeout: float) -> dict[str, Any]:
    name = domain.DAEMONSET_PREFIX
    try:
        ds = await request_json(
            api, "GET", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}", timeout=timeout
        )
    except NotFound:
        return domain.status(None, [])
    pods = await list_items(
        api, f"/api/v1/namespaces/{namespace}/pods", timeout, labelSelector=f"lens.llm-d.ai/prepull={name}"
    )
    # Pods being deleted (an older template being replaced) no longer say anything about the pull.
    current = [p for p in pods if (p.get("metadata") or {}).get("deletionTimestamp") is None]
    return domain.status(ds, current)
