"""gpuctl API: app factory and console entry point."""

from __future__ import annotations

from fastapi import FastAPI

from gpuplane_core.app import create_app, serve
from gpuplane_gpuctl.settings import Settings

SERVICE = "gpuctl"


def build_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    return create_app(service=SERVICE, title="gpuctl API", settings=settings, error_style="simple")


def main() -> None:
    settings = Settings()
    serve(build_app(settings), settings, SERVICE)
