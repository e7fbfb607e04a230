"""gpuplane controller: app factory and console entry point."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gpuplane.controller.v1 import capacity_pb2_grpc, node_agent_pb2_grpc
from gpuplane_controller.api.routes import router
from gpuplane_controller.grpc.servicers import Capacity, NodeAgent
from gpuplane_controller.k8s.inventory import Inventory
from gpuplane_controller.k8s.runtime import Controller
from gpuplane_controller.settings import Settings
from gpuplane_controller.state import ClusterState
from gpuplane_core.app import create_app, serve
from gpuplane_core.grpc.server import make_server
from gpuplane_core.k8s.client import load_api_client

SERVICE = "controller"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    api = await load_api_client(settings.kubeconfig)
    controller = Controller(api, app.state.cluster)
    app.state.controller = controller
    server = make_server(settings.grpc_port, settings.grpc_host)
    node_agent_pb2_grpc.add_NodeAgentServiceServicer_to_server(
        NodeAgent(app.state.cluster, Inventory(api)), server
    )
    capacity_pb2_grpc.add_CapacityServiceServicer_to_server(Capacity(app.state.cluster), server)
    app.state.grpc_server = server
    await server.start()
    await controller.start()
    try:
        yield
    finally:
        await server.stop(grace=1.0)
        await controller.stop()
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
    return app


def main() -> None:
    settings = Settings()
    serve(build_app(settings), settings, SERVICE)
