"""/api/v1/workers: pods with allocations on this node."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from gpuplane_core.errors import NotImplementedYet
from gpuplane_hypervisor.agent import Agent
from gpuplane_hypervisor.api.deps import cached_json, envelope, get_agent
from gpuplane_hypervisor.domain.workers import MountConfig, usage_json, worker_json, worker_usage

router = APIRouter(prefix="/api/v1/workers")


def _mounts(agent: Agent) -> MountConfig:
    return MountConfig(shm_host_root=agent.settings.shm_host_root)


@router.get("")
async def list_workers(agent: Agent = Depends(get_agent)) -> Response:
    def build() -> list[dict[str, Any]]:
        regs = list(agent.registrations.values())
        cfg = _mounts(agent)
        return [worker_json(a, agent.devices, regs, cfg) for a in agent.allocations.allocations.values()]

    return cached_json(agent, "workers", build)


@router.get("/{worker_id}")
async def get_worker(worker_id: str, agent: Agent = Depends(get_agent)) -> JSONResponse:
    alloc = agent.worker(worker_id)
    regs = list(agent.registrations.values())
    body = worker_json(alloc, agent.devices, regs, _mounts(agent))
    body["Usage"] = usage_json(worker_usage(alloc, regs, agent.samples))
    body["Processes"] = [
        {"HostPID": r.host_pid, "ContainerPID": r.container_pid, "ContainerName": r.container_name}
        for r in regs
        if r.pod_uid == alloc.pod_uid
    ]
    return envelope(body)


@router.post("/{worker_id}/snapshot")
async def snapshot(worker_id: str, agent: Agent = Depends(get_agent)) -> JSONResponse:
    agent.worker(worker_id)
    raise NotImplementedYet("worker snapshot is not implemented", code="snapshot_not_implemented")


@router.post("/{worker_id}/resume")
async def resume(worker_id: str, agent: Agent = Depends(get_agent)) -> JSONResponse:
    agent.worker(worker_id)
    raise NotImplementedYet("worker resume is not implemented", code="resume_not_implemented")
