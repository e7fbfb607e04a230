"""/api/v1/devices: the node's accelerators."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from gpuplane_core.errors import NotFound
from gpuplane_hypervisor.agent import Agent
from gpuplane_hypervisor.api.deps import cached_json, envelope, get_agent
from gpuplane_hypervisor.api.shapes import device_json

router = APIRouter(prefix="/api/v1/devices")


@router.get("")
async def list_devices(agent: Agent = Depends(get_agent)) -> Response:
    agent.require_backend()
    return cached_json(agent, "devices", lambda: [device_json(d) for d in agent.devices.values()])


@router.post("/discover")
async def discover(agent: Agent = Depends(get_agent)) -> JSONResponse:
    return envelope([device_json(d) for d in await agent.discover()])


@router.get("/{uuid}")
async def get_device(uuid: str, agent: Agent = Depends(get_agent)) -> JSONResponse:
    agent.require_backend()
    device = agent.devices.get(uuid.lower())
    if device is None:
        raise NotFound(f"device {uuid[:80]} not found on this node", code="device_not_found")
    return envelope(device_json(device))
