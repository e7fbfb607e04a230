"""Read side of the job API: the detail document and the paged list."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuplane_gpuctl.domain.job import Job
from gpuplane_gpuctl.domain.manifests import (
    A_DESCRIPTION,
    L_POOL,
    L_PRIORITY,
    to_yaml_content,
)
from gpuplane_gpuctl.domain.views import (
    PodRow,
    completed_at,
    event_row,
    format_age,
    started_at,
    workload_status,
)
from gpuplane_gpuctl.ports import JobStore


def list_page(
    rows: list[PodRow],
    *,
    kind: str | None,
    pool: str | None,
    status: str | None,
    namespace: str | None,
    page: int,
    page_size: int,
) -> dict[str, Any]:
    """Filter one consistent snapshot, then slice it, so `total` matches the pages."""
    now = datetime.now(UTC)
    if kind or pool or status or namespace:
        rows = [r for r in rows if r.matches(kind, pool, status, namespace)]
    start = (page - 1) * page_size
    return {"total": len(rows), "items": [r.item(now) for r in rows[start : start + page_size]]}


async def _access_methods(repo: JobStore, job: Job, doc: dict[str, Any]) -> dict[str, Any] | None:
    if job.kind == "training":
        return None
    port = (doc.get("service") or {}).get("port")
    running = [p for p in job.pods if (p.get("status") or {}).get("podIP")]
    pod = running[0] if running else None
    pod_ip = (pod or {}).get("status", {}).get("podIP")
    out: dict[str, Any] = {"pod_ip_access": None, "node_port_access": None}
    if pod_ip and port:
        out["pod_ip_access"] = {"pod_ip": pod_ip, "port": port, "url": f"http://{pod_ip}:{port}"}
    svc = await repo.service(job.namespace, job.name)
    node_port = None
    for p in ((svc or {}).get("spec") or {}).get("ports") or []:
        node_port = p.get("nodePort") or node_port
    node = (pod or {}).get("spec", {}).get("nodeName")
    node_ip = await repo.node_ip(node) if node else None
    if node_port:
        out["node_port_access"] = {
            "node_ip": node_ip,
            "node_port": node_port,
            "url": f"http://{node_ip}:{node_port}" if node_ip else None,
        }
    return out


async def job_detail(repo: JobStore, job: Job, job_id: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    w = job.workload
    meta = w.get("metadata") or {}
    labels = meta.get("labels") or {}
    doc = to_yaml_content(w)
    names = {job.name, *(p["metadata"]["name"] for p in job.pods)}
    owners = {o.get("name") for p in job.pods for o in p["metadata"].get("ownerReferences") or []}
    events = await repo.events(job.namespace, names | {n for n in owners if n})
    rows = sorted((event_row(e, now) for e in events), key=lambda r: r.pop("_t"))
    res = dict(doc["resources"])
    res.pop("pool", None)
    res.pop("gpuType", None)
    return {
        "job_id": job_id,
        "name": job.name,
        "namespace": job.namespace,
        "kind": job.kind,
        "resource_type": job.resource_type,
        "status": workload_status(w, job.pods),
        "age": format_age(meta.get("creationTimestamp"), now),
        "started": started_at(w, job.pods),
        "completed": completed_at(w),
        "priority": labels.get(L_PRIORITY, "medium"),
        "pool": labels.get(L_POOL),
        "description": (meta.get("annotations") or {}).get(A_DESCRIPTION),
        "resources": res,
        "pods": [p["metadata"]["name"] for p in job.pods],
        "metrics": {},
        "yaml_content": doc,
        "events": rows,
        "access_methods": await _access_methods(repo, job, doc),
    }
