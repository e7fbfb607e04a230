"""Helpers for the hypervisor tests: the real app on the simulated backend, in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from gpuplane_hypervisor.agent import Agent
from gpuplane_hypervisor.domain.models import Allocation, AllocationEvent, EventType, Resources
from gpuplane_hypervisor.main import build_app
from gpuplane_hypervisor.settings import Settings

GIB = 1024**3


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "node_name": "gpu-node-0",
        "backend": "simulated",
        "simulated_devices": "4xH100-80GB",
        "state_file": str(tmp_path / "state.json"),
        "http_host": "127.0.0.1",
        "sample_interval": 0.05,
        "log_json": False,
    }
    base.update(overrides)
    return Settings(**base)


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The real app with its lifespan run, and an HTTP client bound to it."""
    app = build_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://hypervisor") as client:
            yield app, client


def agent_of(app: FastAPI) -> Agent:
    agent: Agent = app.state.agent
    return agent


def allocation(
    pod_uid: str,
    gpu_uuids: list[str],
    *,
    namespace: str = "ns",
    pod_name: str | None = None,
    tflops_request: float | None = 100.0,
    tflops_limit: float | None = 200.0,
    vram_request: int | None = 8 * GIB,
    vram_limit: int | None = 16 * GIB,
    qos: str = "medium",
    isolation: str = "soft",
    pool: str = "default",
    workload: str = "",
) -> Allocation:
    return Allocation(
        pod_uid=pod_uid,
        namespace=namespace,
        pod_name=pod_name or f"pod-{pod_uid[:8]}",
        gpu_names=tuple(f"gpu-{i}" for i in range(len(gpu_uuids))),
        gpu_uuids=tuple(gpu_uuids),
        request=Resources(tflops=tflops_request, vram=vram_request),
        limit=Resources(tflops=tflops_limit, vram=vram_limit),
        qos=qos,
        isolation=isolation,
        gpu_count=len(gpu_uuids),
        workload=workload,
        pool=pool,
    )


def load(agent: Agent, *allocs: Allocation, revision: int = 1) -> None:
    """Deliver a full listing the way the controller stream does (RESET, ADDED..., SYNCED)."""
    agent.apply_event(AllocationEvent(EventType.RESET, revision))
    for a in allocs:
        agent.apply_event(AllocationEvent(EventType.ADDED, revision, a))
    agent.apply_event(AllocationEvent(EventType.SYNCED, revision))
