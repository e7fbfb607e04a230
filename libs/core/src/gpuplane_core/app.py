"""The one way every service builds and serves its FastAPI app, so error
shapes, body limits, metrics and logging are identical everywhere."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import uvicorn
from fastapi import FastAPI

from gpuplane_core.http_errors import ErrorStyle, install_error_handlers
from gpuplane_core.logging import configure_logging
from gpuplane_core.metrics import install_metrics
from gpuplane_core.settings import ServiceSettings

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[Any]]


def create_app(
    *,
    service: str,
    title: str,
    settings: ServiceSettings,
    error_style: ErrorStyle,
    lifespan: Lifespan | None = None,
    version: str = "0.1.0",
) -> FastAPI:
    app = FastAPI(title=title, version=version, lifespan=lifespan)
    app.state.settings = settings
    install_error_handlers(app, error_style, max_request_bytes=settings.max_request_bytes)
    install_metrics(app, service)
    return app


def serve(app: FastAPI, settings: ServiceSettings, service: str) -> None:
    configure_logging(settings.log_level, settings.log_json, service)
    uvicorn.run(app, host=settings.http_host, port=settings.http_port, log_config=None, access_log=False)
