"""HTTP metrics: route-template labels, bounded cardinality, per-app registries."""

from __future__ import annotations

import httpx
from fastapi import APIRouter, FastAPI
from prometheus_client import Counter
from prometheus_client.parser import text_string_to_metric_families

from gpuplane_core.errors import NotFound
from gpuplane_core.http_errors import install_error_handlers
from gpuplane_core.metrics import install_metrics


def build_app(service: str) -> FastAPI:
    app = FastAPI()
    router = APIRouter(prefix="/devices")

    @router.get("/{uuid}")
    async def get_device(uuid: str) -> dict[str, str]:
        if uuid == "missing":
            raise NotFound("no such device")
        return {"uuid": uuid}

    app.include_router(router, prefix="/api/v1")
    install_error_handlers(app, "simple")
    install_metrics(app, service)
    return app


def client_for(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def scrape(client: httpx.AsyncClient) -> dict[tuple[tuple[str, str], ...], float]:
    """``gpuplane_http_requests_total`` samples keyed by their sorted labels."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "gpuplane_http_requests_total":
                samples[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def key(service: str, route: str, status: str, method: str = "GET") -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"service": service, "method": method, "route": route, "status": status}.items()))


async def test_counts_by_route_template() -> None:
    app = build_app("controller")
    async with client_for(app) as client:
        for uuid in ("GPU-1", "GPU-2", "GPU-3", "missing"):
            await client.get(f"/api/v1/devices/{uuid}")
        await client.get("/no/such/path/123")
        await client.get("/another/unknown")
        samples = await scrape(client)

    assert samples[key("controller", "/api/v1/devices/{uuid}", "200")] == 3
    assert samples[key("controller", "/api/v1/devices/{uuid}", "404")] == 1
    assert samples[key("controller", "unmatched", "404")] == 2
    routes = {dict(labels)["route"] for labels in samples}
    assert not any("GPU-" in route or "/no/such" in route for route in routes)


async def test_latency_histogram_uses_template() -> None:
    app = build_app("lens")
    async with client_for(app) as client:
        await client.get("/api/v1/devices/GPU-9")
        text = (await client.get("/metrics")).text
    labels = 'method="GET",route="/api/v1/devices/{uuid}",service="lens"'
    assert f"gpuplane_http_request_duration_seconds_count{{{labels}}} 1.0" in text


async def test_two_apps_do_not_collide() -> None:
    first, second = build_app("hypervisor"), build_app("gpuctl")
    async with client_for(first) as a, client_for(second) as b:
        await a.get("/api/v1/devices/x")
        await a.get("/api/v1/devices/y")
        await b.get("/api/v1/devices/z")
        first_samples, second_samples = await scrape(a), await scrape(b)

    assert first_samples[key("hypervisor", "/api/v1/devices/{uuid}", "200")] == 2
    assert second_samples[key("gpuctl", "/api/v1/devices/{uuid}", "200")] == 1
    assert all(dict(labels)["service"] == "hypervisor" for labels in first_samples)
    assert all(dict(labels)["service"] == "gpuctl" for labels in second_samples)


async def test_services_register_their_own_metrics_and_install_is_idempotent() -> None:
    app = build_app("controller")
    registry = app.state.metrics_registry
    assert install_metrics(app, "controller") is registry
    reconciles = Counter("gpuplane_reconciles_total", "Reconcile loops run.", registry=registry)
    reconciles.inc(7)
    async with client_for(app) as client:
        await client.get("/api/v1/devices/a")
        text = (await client.get("/metrics")).text
    assert "gpuplane_reconciles_total 7.0" in text
    # A second install would have doubled every count.
    assert 'route="/api/v1/devices/{uuid}",service="controller",status="200"} 1.0' in text
