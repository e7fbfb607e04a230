"""gpuplane hypervisor: app factory and the ``tf-hypervisor`` console entry point."""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from pydantic import ValidationError

from gpuplane_core.app import create_app, serve
from gpuplane_hypervisor.agent import VERSION, Agent
from gpuplane_hypervisor.api import devices, limiter, workers
from gpuplane_hypervisor.gpu.factory import open_backend
from gpuplane_hypervisor.k8s.reviewer import open_reviewer
from gpuplane_hypervisor.metrics import install_agent_metrics
from gpuplane_hypervisor.settings import Settings

SERVICE = "hypervisor"


def _readiness(app: FastAPI) -> str | None:
    agent: Agent | None = getattr(app.state, "agent", None)
    return "starting" if agent is None else agent.readiness()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    backend, error = open_backend(settings)
    agent = Agent(settings, backend, error)
    reviewer, api = await open_reviewer(settings)
    app.state.token_reviewer = reviewer
    link = None
    if settings.controller:
        from gpuplane_hypervisor.grpc.link import ControllerLink

        link = ControllerLink(
            settings.controller,
            settings.node_name,
            VERSION,
            snapshot=lambda: (
                list(agent.devices.values()),
                list(agent.allocations.allocations.values()),
                list(agent.registrations.values()),
                dict(agent.samples),
            ),
            on_event=agent.apply_event,
            resume_revision=agent.allocations.begin_stream,
            heartbeat_interval=settings.heartbeat_interval,
        )
        agent.on_inventory_change = link.inventory_changed
    await agent.start()
    app.state.agent = agent
    app.state.controller_link = link
    install_agent_metrics(app.state.metrics_registry, agent)
    if link is not None:
        link.start()
    try:
        yield
    finally:
        if link is not None:
            await link.close()
        await agent.stop()
        if api is not None:
            await api.close()


def build_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = create_app(
        service=SERVICE,
        title="gpuplane hypervisor",
        settings=settings,
        error_style="simple",
        lifespan=lifespan,
        readiness=_readiness,
    )
    for module in (devices, workers, limiter):
        app.include_router(module.router)
    return app


def parse_args(argv: list[str] | None = None) -> dict[str, Any]:
    """Flags override the GPUPLANE_HYPERVISOR_* environment; unset flags leave it alone."""
    p = argparse.ArgumentParser(prog="tf-hypervisor", description="gpuplane per-node GPU agent")
    p.add_argument("--node-name", help="Kubernetes node name (default: $NODE_NAME, else the hostname)")
    p.add_argument("--port", type=int, dest="http_port", help="HTTP port (default 8001)")
    p.add_argument("--host", dest="http_host", help="HTTP listen address (default 0.0.0.0)")
    p.add_argument("--backend", choices=["nvml", "simulated", "null"], help="GPU backend (default nvml)")
    p.add_argument("--simulated-devices", help='simulated inventory, e.g. "4xH100-80GB"')
    p.add_argument("--simulated-usage-file", help="JSON file with simulated per-process usage")
    p.add_argument("--discovery-interval", type=float, help="seconds between device discoveries")
    p.add_argument("--controller", help="controller gRPC address host:port")
    p.add_argument("--state-file", help="node-local state file (registrations, last allocations)")
    p.add_argument("--metrics-file", help="append line-protocol metering rows to this file")
    p.add_argument("--metrics-write-url", help="POST metering rows to this InfluxDB/GreptimeDB URL")
    p.add_argument(
        "--fail-on-init-error",
        choices=["true", "false"],
        help="NVML init failure: true keeps /readyz 503, false serves no devices",
    )
    args = vars(p.parse_args(argv))
    return {k: v for k, v in args.items() if v is not None}


def main(argv: list[str] | None = None) -> None:
    overrides = parse_args(argv)
    try:
        settings = Settings(**overrides)
    except ValidationError as e:
        sys.exit(f"tf-hypervisor: invalid configuration: {e}")
    serve(build_app(settings), settings, SERVICE)
