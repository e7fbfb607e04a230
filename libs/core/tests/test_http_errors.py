"""Error shapes of both styles, exercised through a real FastAPI app over ASGI."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request

from gpuplane_core.errors import Conflict, InternalError, NotFound
from gpuplane_core.http_errors import ErrorStyle, install_error_handlers, validation_message

LIMIT = 100


def build_app(style: ErrorStyle) -> FastAPI:
    app = FastAPI()
    router = APIRouter(prefix="/api/v1")

    @router.get("/devices/{uuid}")
    async def get_device(uuid: str) -> dict[str, str]:
        raise NotFound(f"device {uuid} not found")

    @router.get("/pods")
    async def list_pods(podName: str, limit: int = 10) -> dict[str, str]:
        return {"podName": podName}

    @router.post("/conflict")
    async def conflict() -> None:
        raise Conflict("pool already exists", code="pool_exists")

    @router.get("/boom")
    async def boom() -> None:
        raise RuntimeError("db password=hunter2 at /srv/secret.py line 12")

    @router.get("/internal")
    async def internal() -> None:
        raise InternalError("invariant broken: node table has 2 leaders")

    @router.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"received": len(await request.body())}

    app.include_router(router)
    install_error_handlers(app, style, max_request_bytes=LIMIT)
    return app


@pytest.fixture(params=["simple", "problem"])
def style(request: pytest.FixtureRequest) -> ErrorStyle:
    value: ErrorStyle = request.param
    return value


@pytest.fixture
async def client(style: ErrorStyle) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(style))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


def assert_error(
    response: httpx.Response, style: ErrorStyle, status: int, title: str, message: str, code: str
) -> None:
    assert response.status_code == status
    if style == "simple":
        assert response.headers["content-type"] == "application/json"
        assert response.json() == {"error": message}
    else:
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json() == {
            "type": "about:blank",
            "status": status,
            "title": title,
            "detail": message,
            "code": code,
            "error": message,
        }


async def test_domain_error(client: httpx.AsyncClient, style: ErrorStyle) -> None:
    response = await client.get("/api/v1/devices/GPU-123")
    assert_error(response, style, 404, "Not Found", "device GPU-123 not found", "not_found")


async def test_domain_error_custom_code(client: httpx.AsyncClient, style: ErrorStyle) -> None:
    response = await client.post("/api/v1/conflict")
    assert_error(response, style, 409, "Conflict", "pool already exists", "pool_exists")


async def test_validation_error_names_field(client: httpx.AsyncClient, style: ErrorStyle) -> None:
    response = await client.get("/api/v1/pods")
    if style == "simple":
        assert_error(response, style, 400, "Bad Request", "query.podName: Field required", "invalid_spec")
    else:
        assert_error(
            response, style, 422, "Unprocessable Entity", "query.podName: Field required", "unprocessable"
        )


async def test_validation_error_does_not_echo_input(client: httpx.AsyncClient, style: ErrorStyle) -> None:
    huge = "9" * 5000 + "x"
    response = await client.get("/api/v1/pods", params={"podName": "p", "limit": huge})
    assert response.status_code in (400, 422)
    assert "query.limit" in response.text
    assert huge[:100] not in response.text
    assert len(response.content) < 1000


async def test_unknown_route(client: httpx.AsyncClient, style: ErrorStyle) -> None:
    response = await client.get("/api/v1/nope")
    assert_error(response, style, 404, "Not Found", "Not Found", "not_found")


async def test_method_not_allowed_keeps_allow_header(client: httpx.AsyncClient, style: ErrorStyle) -> None:
    response = await client.delete("/api/v1/pods")
    assert_error(response, style, 405, "Method Not Allowed", "Method Not Allowed", "method_not_allowed")
    assert response.headers["allow"] == "GET"


async def test_unexpected_exception_is_generic_500(
    client: httpx.AsyncClient, style: ErrorStyle, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="gpuplane_core.http_errors"):
        response = await client.get("/api/v1/boom")
    assert_error(response, style, 500, "Internal Server Error", "internal error", "internal_error")
    for leak in ("hunter2", "Traceback", "RuntimeError", "secret.py"):
        assert leak not in response.text
    # ...but the traceback is logged for operators.
    assert any(r.exc_info and r.exc_info[0] is RuntimeError for r in caplog.records)


async def test_internal_error_message_is_hidden(client: httpx.AsyncClient, style: ErrorStyle) -> None:
    response = await client.get("/api/v1/internal")
    assert_error(response, style, 500, "Internal Server Error", "internal error", "internal_error")
    assert "leaders" not in response.text


async def test_body_within_limit_passes(client: httpx.AsyncClient, style: ErrorStyle) -> None:
    response = await client.post("/api/v1/echo", content=b"x" * LIMIT)
    assert response.status_code == 200
    assert response.json() == {"received": LIMIT}


async def test_oversized_body_by_content_length(client: httpx.AsyncClient, style: ErrorStyle) -> None:
    response = await client.post("/api/v1/echo", content=b"x" * (LIMIT + 1))
    message = f"request body exceeds {LIMIT} bytes"
    assert_error(response, style, 413, "Request Entity Too Large", message, "payload_too_large")


async def test_oversized_streamed_body_stops_reading(client: httpx.AsyncClient, style: ErrorStyle) -> None:
    pulled = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal pulled
        for _ in range(1000):
            pulled += 1
            yield b"y" * 40

    response = await client.post("/api/v1/echo", content=chunks())
    message = f"request body exceeds {LIMIT} bytes"
    assert_error(response, style, 413, "Request Entity Too Large", message, "payload_too_large")
    assert pulled <= LIMIT // 40 + 2  # the rest of the body was never read


def test_validation_message_is_bounded() -> None:
    errors = [
        {"loc": ("body", "items", i, "x" * 500), "msg": "bad " * 100, "input": "secret"} for i in range(50)
    ]
    message = validation_message(errors)
    assert message.startswith("body.items[0].xxx")
    assert message.endswith("and 45 more")
    assert "secret" not in message
    assert len(message) < 1500


async def test_status_map_renumbers_domain_errors_only() -> None:
    from fastapi import FastAPI

    from gpuplane_core.errors import NotFound, UpstreamError

    app = FastAPI()
    install_error_handlers(app, "simple", status_map={502: 500})

    @app.get("/down")
    async def down() -> None:
        raise UpstreamError("Kubernetes API error (503): etcd unavailable")

    @app.get("/missing")
    async def missing() -> None:
        raise NotFound("job x not found")

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        r = await http.get("/down")
        assert (r.status_code, r.json()) == (500, {"error": "Kubernetes API error (503): etcd unavailable"})
        assert (await http.get("/missing")).status_code == 404
