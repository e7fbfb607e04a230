"""/api/v1/quotas: quota documents become labelled namespaces with ResourceQuotas."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from gpuplane_core.errors import Conflict, NotFound
from gpuplane_gpuctl.domain.quota import (
    A_QUOTA_DESCRIPTION,
    GPU_QUOTA_KEY,
    L_QUOTA,
    parse_quota,
    resource_quota,
)
from gpuplane_gpuctl.domain.views import format_age
from gpuplane_gpuctl.domain.yaml_load import YamlLimits, load_document

router = APIRouter(prefix="/api/v1/quotas", tags=["quotas"])


class CreateQuota(BaseModel):
    model_config = ConfigDict(extra="forbid")
    yamlContent: str


def quota_view(q: dict[str, Any], now: datetime) -> dict[str, Any]:
    meta = q["metadata"]
    hard = dict((q.get("spec") or {}).get("hard") or {})
    used = dict((q.get("status") or {}).get("used") or {})
    # The quota controller fills status shortly after creation; until then nothing is used.
    used = {k: used.get(k, "0") for k in hard}
    return {
        "name": meta["name"],
        "quota": (meta.get("labels") or {}).get(L_QUOTA),
        "namespace": meta["namespace"],
        "description": (meta.get("annotations") or {}).get(A_QUOTA_DESCRIPTION),
        "cpu": hard.get("cpu"),
        "memory": hard.get("memory"),
        "gpu": hard.get(GPU_QUOTA_KEY),
        "hard": hard,
        "used": used,
        "age": format_age(meta.get("creationTimestamp"), now),
    }


@router.post("", status_code=201)
async def create_quota(body: CreateQuota, request: Request) -> dict[str, Any]:
    st = request.app.state
    limits = YamlLimits(max_bytes=st.settings.max_yaml_bytes)
    spec = parse_quota(load_document(body.yamlContent, limits))
    targets = spec.targets()
    # Refuse before creating anything: one gpuctl quota per namespace.
    for ns in targets:
        existing = await st.cluster.gpuctl_quotas(ns) if await st.cluster.namespace_exists(ns) else []
        if existing:
            raise Conflict(
                f"namespace {ns} already has gpuctl quota {existing[0]['metadata']['name']}; delete it first",
                field=f"namespace.{ns}",
            )
    created = []
    for ns, lim in targets.items():
        await st.cluster.ensure_namespace(ns)
        created.append(await st.cluster.create_quota(resource_quota(spec, ns, lim)))
    now = datetime.now(UTC)
    return {
        "name": spec.quota.name,
        "namespaces": sorted(targets),
        "items": [quota_view(q, now) for q in created],
        "message": f"quota {spec.quota.name} created for {len(targets)} namespace(s)",
    }


@router.get("")
async def list_quotas(request: Request, namespace: str | None = None) -> dict[str, Any]:
    st = request.app.state
    if namespace and not await st.cluster.namespace_exists(namespace):
        raise NotFound(f"namespace {namespace} not found", field="namespace")
    now = datetime.now(UTC)
    items = [quota_view(q, now) for q in await st.cluster.gpuctl_quotas(namespace)]
    return {"total": len(items), "items": items}


async def _quotas_of(request: Request, ns: str) -> list[dict[str, Any]]:
    st = request.app.state
    if not await st.cluster.namespace_exists(ns):
        raise NotFound(f"namespace {ns} not found")
    quotas: list[dict[str, Any]] = await st.cluster.gpuctl_quotas(ns)
    if not quotas:
        raise NotFound(f"namespace {ns} has no gpuctl quota")
    return quotas


@router.get("/{namespaceName}")
async def get_quota(namespaceName: str, request: Request) -> dict[str, Any]:
    quotas = await _quotas_of(request, namespaceName)
    view = quota_view(quotas[0], datetime.now(UTC))
    return view


@router.delete("/{namespaceName}")
async def delete_quota(namespaceName: str, request: Request) -> dict[str, Any]:
    quotas = await _quotas_of(request, namespaceName)
    for q in quotas:
        await request.app.state.cluster.delete_quota(namespaceName, q["metadata"]["name"])
    return {
        "namespace": namespaceName,
        "deleted": [q["metadata"]["name"] for q in quotas],
        "status": "deleted",
    }
