"""Controller HTTP API: allocator state and scheduling dry runs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gpuplane_controller.manifest import parse_manifest
from gpuplane_controller.state import ClusterState, SchedulerNotFound
from gpuplane_controller.views import allocation_state, simulate_json

router = APIRouter()


def _state(request: Request) -> ClusterState:
    state: ClusterState = request.app.state.cluster
    return state


@router.get("/api/allocation")
async def get_allocation(request: Request) -> dict[str, Any]:
    return allocation_state(_state(request))


# The body is read raw (YAML or JSON), so FastAPI cannot infer it: document it for clients.
_POD_MANIFEST_BODY = {
    "requestBody": {
        "required": True,
        "description": "A Pod manifest (`kubectl get pod -o yaml`), as YAML or JSON.",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"kind": {"type": "string"}, "spec": {"type": "object"}},
                }
            },
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


@router.post("/api/simulate-schedule", response_model=None, openapi_extra=_POD_MANIFEST_BODY)
async def simulate_schedule(request: Request) -> dict[str, Any] | JSONResponse:
    pod = parse_manifest(await request.body())
    try:
        decision = _state(request).simulate(pod)
    except SchedulerNotFound as e:
        return JSONResponse({"error": e.message}, status_code=500)
    return simulate_json(decision)
