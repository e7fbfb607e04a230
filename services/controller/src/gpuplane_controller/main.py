"""gpuplane controller: app factory and console entry point."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gpuplane.controller.v1 import capacity_pb2_grpc, node_agent_pb2_grpc
from gpuplane_controller.api.component_routes import router as component_router
from gpuplane_controller.api.diag_routes import router as diag_router
from gpuplane_controller.api.routes import router
from gpuplane_controller.components import Components
from gpuplane_controller.grpc.servicers import Capacity, NodeAgent
from gpuplane_controller.k8s.inventory import Inventory
from gpuplane_controller.k8s.runtime import Controller
from gpuplane_controller.operations import Operations
from gpuplane_controller.settings import Settings
from gpuplane_controller.state import ClusterState
from gpuplane_core.app import create_app
from gpuplane_core.grpc.server import make_server
from gpuplane_core.k8s.client import load_api_client

SERVICE = "controller"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    api = await load_api_client(settings.kubeconfig)
    components = Components(app, api, settings)
    controller = Controller(api, app.state.cluster, components.leader)
    components.attach(controller)
    app.state.controller = controller
    ops = Operations(app, api, settings, controller)
    server = make_server(settings.grpc_port, settings.grpc_host)
    node_agent = NodeAgent(
        app.state.cluster,
        Inventory(api),
        ops.heartbeats,
        settings.heartbeat_interval_seconds,
        settings.allocation_history,
    )
    node_agent_pb2_grpc.add_NodeAgentServiceServicer_to_server(node_agent, server)
    capacity_pb2_grpc.add_CapacityServiceServicer_to_server(Capacity(app.state.cluster), server)
    app.state.grpc_server = server
    await server.start()
    await controller.start()
    components.start()
    await ops.start()
    try:
        yield
    finally:
        await server.stop(grace=1.0)
        await ops.stop()
        await controller.stop()
        await components.stop()
        await api.close()


def _readiness(app: FastAPI) -> str | None:
    controller: Controller | None = getattr(app.state, "controller", None)
    if controller is None:
        return "starting"
    return controller.not_ready_reason()


def build_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = create_app(
        service=SERVICE,
        title="gpuplane controller",
        settings=settings,
        error_style="simple",
        lifespan=lifespan,
        readiness=_readiness,
    )
    app.state.cluster = ClusterState()
    app.include_router(router)
    app.include_router(diag_router)
    app.include_router(component_router)
    return app


def main() -> None:
    from gpuplane_controller.cli import main as cli_main  # flags (cli.py) over env settings

    cli_main()
