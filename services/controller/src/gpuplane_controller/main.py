"""gpuplane controller: app factory and console entry point."""

from __future__ import annotations

from fastapi import FastAPI

from gpuplane_controller.api.health import router as health_router
from gpuplane_controller.settings import Settings
from gpuplane_core.app import create_app, serve

SERVICE = "controller"


def build_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = create_app(service=SERVICE, title="gpuplane controller", settings=settings, error_style="simple")
    app.include_router(health_router)
    return app


def main() -> None:
    settings = Settings()
    serve(build_app(settings), settings, SERVICE)
