"""The one way every service builds and serves its FastAPI app, so error
shapes, body limits, metrics and logging are identical everywhere."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from gpuplane_core.http_errors import ErrorStyle, install_error_handlers
from gpuplane_core.logging import configure_logging
from gpuplane_core.metrics import install_metrics
from gpuplane_core.openapi_errors import install_error_docs
from gpuplane_core.settings import ServiceSettings

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[Any]]
# Returns None when the service can serve, else why not (shown by /readyz with 503).
Readiness = Callable[[FastAPI], str | None]


def _always_ready(_: FastAPI) -> str | None:
    return None


def create_app(
    *,
    service: str,
    title: str,
    settings: ServiceSettings,
    error_style: ErrorStyle,
    lifespan: Lifespan | None = None,
    readiness: Readiness = _always_ready,
    status_map: dict[int, int] | None = None,
    version: str = "0.1.0",
) -> FastAPI:
    """The app with error handling, body limit, `/metrics`, `/healthz` and `/readyz`."""
    app = FastAPI(title=title, version=version, lifespan=lifespan)
    app.state.settings = settings
    install_error_handlers(
        app, error_style, max_request_bytes=settings.max_request_bytes, status_map=status_map
    )
    install_metrics(app, service)
    install_error_docs(app, error_style)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False, response_model=None)
    async def readyz() -> dict[str, str] | JSONResponse:
        reason = readiness(app)
        if reason is not None:
            return JSONResponse({"status": "not ready", "error": reason}, status_code=503)
        return {"status": "ready"}

    return app


def serve(app: FastAPI, settings: ServiceSettings, service: str) -> None:
    configure_logging(settings.log_level, settings.log_json, service)
    uvicorn.run(app, host=settings.http_host, port=settings.http_port, log_config=None, access_log=False)
