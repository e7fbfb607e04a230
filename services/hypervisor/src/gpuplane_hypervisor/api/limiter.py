"""The limiter API, in the snake_case shapes of the older Rust hypervisor.

Only ``GET /api/v1/pod`` (with a token) and ``POST /api/v1/process`` authenticate:
the token goes through TokenReview and only the reviewed pod UID is used.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel, ConfigDict

from gpuplane_core.auth import require_identity
from gpuplane_core.errors import NotFound, Unauthorized
from gpuplane_hypervisor.agent import Agent
from gpuplane_hypervisor.api.deps import get_agent
from gpuplane_hypervisor.domain.workers import limiter_entry, pod_info, snapshot_candidates

router = APIRouter(prefix="/api/v1")


@router.get("/pod")
async def get_pod(
    request: Request,
    container_name: str | None = Query(default=None, max_length=253),
    agent: Agent = Depends(get_agent),
) -> dict[str, Any]:
    if "authorization" not in request.headers:
        if container_name is not None:
            raise Unauthorized("missing bearer token")
        # Troubleshooting listing: pods holding allocations on this node.
        pods = [pod_info(a, agent.devices) for a in agent.allocations.allocations.values()]
        return {"success": True, "data": pods, "message": f"{len(pods)} pods with allocations on this node"}
    identity = await require_identity(request)
    alloc = agent.pod_allocation(identity)
    return {"success": True, "data": pod_info(alloc, agent.devices), "message": "ok"}


@router.post("/process")
async def register_process(
    request: Request,
    container_name: str = Query(min_length=1, max_length=253),
    container_pid: int = Query(ge=1, le=4_194_304),
    agent: Agent = Depends(get_agent),
) -> dict[str, Any]:
    identity = await require_identity(request)
    reg = await agent.register_process(identity, container_name, container_pid)
    return {
        "success": True,
        "data": {
            "host_pid": reg.host_pid,
            "container_pid": reg.container_pid,
            "container_name": reg.container_name,
            "pod_name": reg.pod_name,
            "namespace": reg.namespace,
        },
        "message": "process registered",
    }


@router.get("/limiter")
async def limiters(agent: Agent = Depends(get_agent)) -> dict[str, Any]:
    return {"limiters": [limiter_entry(a, agent.devices) for a in agent.allocations.allocations.values()]}


class TrapRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device_uuid: str | None = None
    """Device under memory pressure; omitted means the whole node."""


@router.post("/trap")
async def trap(
    body: TrapRequest | None = Body(default=None), agent: Agent = Depends(get_agent)
) -> dict[str, Any]:
    uuid = body.device_uuid.lower() if body and body.device_uuid else None
    if uuid is not None and uuid not in agent.devices:
        raise NotFound(f"device {uuid[:80]} not found on this node", code="device_not_found")
    count = snapshot_candidates(agent.allocations.allocations.values(), uuid)
    return {"message": "trap initiated", "snapshot_count": count}
