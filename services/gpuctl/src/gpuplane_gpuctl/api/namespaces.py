"""/api/v1/namespaces: only gpuctl's namespaces (label runwhere.ai/namespace=true, plus default)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request

from gpuplane_core.errors import Forbidden
from gpuplane_gpuctl.api.quotas import quota_view
from gpuplane_gpuctl.domain.quota import L_NAMESPACE
from gpuplane_gpuctl.domain.views import format_age

router = APIRouter(prefix="/api/v1/namespaces", tags=["namespaces"])

NEVER_DELETED = ("default", "kube-system", "kube-public", "kube-node-lease")


def _managed(ns: dict[str, Any]) -> bool:
    meta = ns["metadata"]
    return meta["name"] == "default" or (meta.get("labels") or {}).get(L_NAMESPACE) == "true"


def ns_view(ns: dict[str, Any], now: datetime) -> dict[str, Any]:
    meta = ns["metadata"]
    return {
        "name": meta["name"],
        "status": (ns.get("status") or {}).get("phase", "Active"),
        "age": format_age(meta.get("creationTimestamp"), now),
        "createdAt": meta.get("creationTimestamp"),
        "labels": meta.get("labels") or {},
    }


@router.get("")
async def list_namespaces(request: Request) -> dict[str, Any]:
    now = datetime.now(UTC)
    items = [ns_view(n, now) for n in await request.app.state.cluster.namespaces()]
    return {"total": len(items), "items": items}


@router.get("/{namespaceName}")
async def get_namespace(namespaceName: str, request: Request) -> dict[str, Any]:
    cluster = request.app.state.cluster
    ns = await cluster.read_namespace(namespaceName)
    if not _managed(ns):
        raise Forbidden(f"namespace {namespaceName} is not managed by gpuctl", code="unmanaged_namespace")
    now = datetime.now(UTC)
    quotas = [quota_view(q, now) for q in await cluster.gpuctl_quotas(namespaceName)]
    return {**ns_view(ns, now), "quota": quotas[0] if quotas else None, "quotas": quotas}


@router.delete("/{namespaceName}")
async def delete_namespace(namespaceName: str, request: Request) -> dict[str, Any]:
    cluster = request.app.state.cluster
    if namespaceName in NEVER_DELETED or namespaceName.startswith("kube-"):
        raise Forbidden(f"namespace {namespaceName} is never deleted by gpuctl", code="protected_namespace")
    ns = await cluster.read_namespace(namespaceName)
    if not _managed(ns):
        raise Forbidden(f"namespace {namespaceName} is not managed by gpuctl", code="unmanaged_namespace")
    await cluster.delete_namespace(namespaceName)
    return {"name": namespaceName, "status": "Terminating", "message": "namespace deletion submitted"}
