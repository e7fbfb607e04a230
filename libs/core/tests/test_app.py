"""create_app: readiness reports why a service cannot serve yet."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from gpuplane_core.app import create_app
from gpuplane_core.settings import ServiceSettings


async def test_readyz_is_503_with_the_reason_until_ready() -> None:
    state = {"reason": "device discovery has not run yet"}

    def readiness(_: FastAPI) -> str | None:
        return state["reason"] or None

    settings = ServiceSettings(http_port=1, grpc_port=2)
    app = create_app(service="t", title="t", settings=settings, error_style="simple", readiness=readiness)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        r = await http.get("/readyz")
        assert r.status_code == 503
        assert r.json() == {"status": "not ready", "error": "device discovery has not run yet"}
        state["reason"] = ""
        r = await http.get("/readyz")
        assert (r.status_code, r.json()) == (200, {"status": "ready"})
        assert (await http.get("/healthz")).json() == {"status": "ok"}
