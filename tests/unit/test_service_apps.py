"""Every service app is built the shared way: its port, health, metrics and documented error shape."""

from __future__ import annotations

import importlib
from typing import Any

import httpx
import pytest

SERVICES = [
    # (service, package, default HTTP port, body of an unknown route's 404)
    ("controller", "gpuplane_controller", 8080, {"error": "Not Found"}),
    ("hypervisor", "gpuplane_hypervisor", 8001, {"error": "Not Found"}),
    ("gpuctl", "gpuplane_gpuctl", 8000, {"error": "Not Found"}),
    ("lens", "gpuplane_lens", 8090, {"code": "not_found", "status": 404}),
]


@pytest.mark.parametrize(("service", "package", "port", "not_found"), SERVICES, ids=[s[0] for s in SERVICES])
async def test_health_metrics_and_error_shape(
    service: str, package: str, port: int, not_found: dict[str, Any]
) -> None:
    settings = importlib.import_module(f"{package}.settings").Settings()
    assert settings.http_port == port
    app = importlib.import_module(f"{package}.main").build_app(settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        # Not started (no lifespan ran): each service's own tests cover when it becomes ready.
        ready = await http.get("/readyz")
        assert ready.status_code in (200, 503)
        assert "status" in ready.json()
        missing = await http.get("/no/such/route")
        assert missing.status_code == 404
        assert not_found.items() <= missing.json().items()
        metrics = (await http.get("/metrics")).text
        labels = f'method="GET",route="/healthz",service="{service}",status="200"'
        sample = f"gpuplane_http_requests_total{{{labels}}} 1.0"
        assert sample in metrics
