"""Remote cleanup when a cluster is deleted (gateway namespace, HF secret, draft storage)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubernetes_asyncio import client

from gpuplane_core.errors import Conflict, GpuplaneError, NotFound, UpstreamError
from gpuplane_lens.domain.cleanup import may_delete_namespace
from gpuplane_lens.k8s.clients import list_items, request_json

logger = logging.getLogger(__name__)

LENS_SELECTOR = "app.kubernetes.io/managed-by=llm-d-lens"
STORAGE_SELECTOR = "lens.llm-d.ai/storage-volume"
# Events are written by Kubernetes about anything that happened; they never keep a namespace alive.
_IGNORED_RESOURCES = {("", "events"), ("events.k8s.io", "events")}


async def check_deletable(api: client.ApiClient, timeout: float) -> None:
    """409 when Lens deployments are still available or storage volumes remain (non-draft clusters)."""
    try:
        deployments, pvcs = await asyncio.gather(
            list_items(api, "/apis/apps/v1/deployments", timeout, labelSelector=LENS_SELECTOR),
            list_items(api, "/api/v1/persistentvolumeclaims", timeout, labelSelector=STORAGE_SELECTOR),
        )
    except GpuplaneError as err:
        raise UpstreamError(
            f"cannot check the cluster before deleting it: {err.message}",
            code="cluster_gateway_cleanup_failed",
        ) from None
    available = [d for d in deployments if int((d.get("status") or {}).get("availableReplicas") or 0) > 0]
    if available:
        names = ", ".join(sorted(f"{d['metadata']['namespace']}/{d['metadata']['name']}" for d in available))
        raise Conflict(
            f"cluster still has available deployments: {names}", code="cluster_has_available_deployments"
        )
    if pvcs:
        names = ", ".join(sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pvcs))
        raise Conflict(f"cluster still has storage volumes: {names}", code="cluster_has_storage_volumes")


async def delete_gateway_namespace(api: client.ApiClient, namespace: str, timeout: float) -> None:
    """Must succeed (a missing namespace counts as success), else 502 `cluster_gateway_cleanup_failed`."""
    try:
        await request_json(api, "DELETE", f"/api/v1/namespaces/{namespace}", timeout=timeout)
    except NotFound:
        return
    except GpuplaneError as err:
        raise UpstreamError(
            f"could not delete gateway namespace {namespace}: {err.message}",
            code="cluster_gateway_cleanup_failed",
        ) from None


async def _namespaced_resources(api: client.ApiClient, timeout: float) -> list[tuple[str, str, str]]:
    """(group, path prefix, resource) for every listable namespaced resource (preferred versions)."""
    out: list[tuple[str, str, str]] = []
    core = await request_json(api, "GET", "/api/v1", timeout=timeout)
    out.extend(("", "/api/v1", r["name"]) for r in core.get("resources", []) if _listable(r))
    groups = await request_json(api, "GET", "/apis", timeout=timeout)
    versions = [(g["name"], g["preferredVersion"]["groupVersion"]) for g in groups.get("groups", [])]
    docs = await asyncio.gather(
        *(request_json(api, "GET", f"/apis/{gv}", timeout=timeout) for _, gv in versions)
    )
    for (group, gv), doc in zip(versions, docs, strict=True):
        out.extend((group, f"/apis/{gv}", r["name"]) for r in doc.get("resources", []) if _listable(r))
    return [t for t in out if (t[0], t[2]) not in _IGNORED_RESOURCES]


def _listable(resource: dict[str, Any]) -> bool:
    return (
        bool(resource.get("namespaced"))
        and "/" not in resource["name"]
        and "list" in resource.get("verbs", [])
    )


async def remaining_objects(
    api: client.ApiClient, namespace: str, timeout: float
) -> list[tuple[str, dict[str, Any]]] | None:
    """Every object left in ``namespace`` as (kind, object); None if anything could not be listed."""
    try:
        resources = await _namespaced_resources(api, timeout)
        sem = asyncio.Semaphore(16)

        async def one(prefix: str, resource: str) -> list[tuple[str, dict[str, Any]]]:
            async with sem:
                page = await request_json(
                    api,
                    "GET",
                    f"{prefix}/namespaces/{namespace}/{resource}",
                    query={"limit": 50},
                    timeout=timeout,
                )
            kind = str(page.get("kind", "")).removesuffix("List")
            return [(kind, item) for item in page.get("items") or []]

        lists = await asyncio.gather(*(one(prefix, res) for _, prefix, res in resources))
    except GpuplaneError:
        return None
    return [obj for chunk in lists for obj in chunk]


async def delete_hf_secret(
    api: client.ApiClient, cluster_id: str, namespace: str, name: str, created_by_lens: bool, timeout: float
) -> None:
    """Best effort: the Secret, then its namespace when the documented rules allow it."""
    try:
        await request_json(api, "DELETE", f"/api/v1/namespaces/{namespace}/secrets/{name}", timeout=timeout)
    except NotFound:
        pass
    except GpuplaneError as err:
        logger.warning("could not delete HF token secret %s/%s: %s", namespace, name, err.message)
        return
    try:
        ns = await request_json(api, "GET", f"/api/v1/namespaces/{namespace}", timeout=timeout)
    except GpuplaneError:
        return
    labels = (ns.get("metadata") or {}).get("labels") or {}
    remaining = await remaining_objects(api, namespace, timeout)
    if may_delete_namespace(namespace, cluster_id, labels, created_by_lens, remaining):
        try:
            await request_json(api, "DELETE", f"/api/v1/namespaces/{namespace}", timeout=timeout)
        except GpuplaneError as err:
            logger.warning("could not delete namespace %s: %s", namespace, err.message)


async def delete_draft_storage(api: client.ApiClient, timeout: float) -> None:
    """Best effort: every Lens storage PVC and the PV bound to it (Retain keeps the files)."""
    try:
        pvcs = await list_items(
            api, "/api/v1/persistentvolumeclaims", timeout, labelSelector=STORAGE_SELECTOR
        )
    except GpuplaneError as err:
        logger.warning("could not list draft storage volumes: %s", err.message)
        return
    for pvc in pvcs:
        meta = pvc["metadata"]
        volume = (pvc.get("spec") or {}).get("volumeName")
        for path in (
            f"/api/v1/namespaces/{meta['namespace']}/persistentvolumeclaims/{meta['name']}",
            f"/api/v1/persistentvolumes/{volume}" if volume else None,
        ):
            if path is None:
                continue
            try:
                await request_json(api, "DELETE", path, timeout=timeout)
            except NotFound:
                pass
            except GpuplaneError as err:
                logger.warning("could not delete %s: %s", path, err.message)
