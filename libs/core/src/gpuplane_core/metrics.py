"""Prometheus HTTP metrics and the ``GET /metrics`` endpoint for a FastAPI app.

Each app gets its own ``CollectorRegistry`` (kept on ``app.state.metrics_registry``)
instead of the process-global default, so several apps can be built in one test
process without "Duplicated timeseries" errors, and a service's ``/metrics``
shows only its own series. Services register their own metrics on that registry.

The ``route`` label is the matched route template (``/api/v1/devices/{uuid}``),
or ``unmatched`` when no route matched, so label cardinality stays bounded no
matter what paths clients send.
"""

from __future__ import annotations

import time

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNMATCHED_ROUTE = "unmatched"

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def route_template(scope: Scope) -> str:
    """The full template of the route the router matched for ``scope``, else ``unmatched``.

    Since FastAPI resolves ``include_router`` lazily, ``scope["route"]`` holds the route
    as declared on its own router (``/devices/{uuid}``, without the include prefix); the
    full template (``/api/v1/devices/{uuid}``) is on FastAPI's effective route context,
    so that is preferred when present.
    """
    fastapi_scope = scope.get("fastapi")
    context = fastapi_scope.get("effective_route_context") if isinstance(fastapi_scope, dict) else None
    for candidate in (context, scope.get("route")):
        template = getattr(candidate, "path_format", None) or getattr(candidate, "path", None)
        if isinstance(template, str) and template:
            return template
    return UNMATCHED_ROUTE


class HttpMetricsMiddleware:
    """Pure ASGI middleware (no ``BaseHTTPMiddleware``, so streaming and background tasks are untouched).

    The route is read from the scope *after* the app ran, because the router
    records the matched route into the shared scope dict on the way in.
    """

    def __init__(self, app: ASGIApp, *, service: str, requests: Counter, latency: Histogram) -> None:
        self.app = app
        self.service = service
        self.requests = requests
        self.latency = latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # if the app raises before starting a response, the server answers 500
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = route_template(scope)
            method = str(scope.get("method", "")).upper()
            self.requests.labels(self.service, method, route, str(status)).inc()
            self.latency.labels(self.service, method, route).observe(time.perf_counter() - started)


def install_metrics(app: FastAPI, service: str) -> CollectorRegistry:
    """Add request metrics and ``GET /metrics`` to ``app``; returns its registry (idempotent)."""
    existing = getattr(app.state, "metrics_registry", None)
    if isinstance(existing, CollectorRegistry):
        return existing
    registry = CollectorRegistry(auto_describe=True)
    requests = Counter(
        "gpuplane_http_requests_total",
        "HTTP requests handled, by matched route template and status code.",
        ("service", "method", "route", "status"),
        registry=registry,
    )
    latency = Histogram(
        "gpuplane_http_request_duration_seconds",
        "Time from receiving an HTTP request to finishing its response.",
        ("service", "method", "route"),
        buckets=_BUCKETS,
        registry=registry,
    )
    app.add_middleware(HttpMetricsMiddleware, service=service, requests=requests, latency=latency)

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_api_route("/metrics", metrics, methods=["GET"], include_in_schema=False)
    app.state.metrics_registry = registry
    return registry
