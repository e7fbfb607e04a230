"""The one mapping from exceptions to HTTP error responses, in the two documented shapes.

* ``simple`` (controller, hypervisor, gpuctl): ``{"error": "<message>"}``.
* ``problem`` (Lens): RFC 7807 ``application/problem+json`` with ``type``, ``status``,
  ``title``, ``detail`` and gpuplane's ``code``, plus ``error`` (= ``detail``) so
  clients of either style can read the message from the same key.

Request validation failures name the offending field paths but never echo the
input; unexpected exceptions are logged with their traceback and answered with a
generic ``internal error`` so nothing internal leaks to callers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuplane_core.errors import GpuplaneError, InternalError, PayloadTooLarge

ErrorStyle = Literal["simple", "problem"]

INTERNAL_MESSAGE = "internal error"
PROBLEM_CONTENT_TYPE = "application/problem+json"

_MAX_FIELD_ERRORS = 5
_MAX_PART_CHARS = 120
_MAX_MESSAGE_CHARS = 1024

logger = logging.getLogger(__name__)


def error_response(
    status: int,
    message: str,
    code: str,
    style: ErrorStyle,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """Build the error response for ``style``; every error path in this module goes through here."""
    if len(message) > _MAX_MESSAGE_CHARS:  # messages may quote user input: keep answers small
        message = message[: _MAX_MESSAGE_CHARS - 3] + "..."
    if style == "simple":
        return JSONResponse({"error": message}, status_code=status, headers=headers)
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Request failed"
    body = {
        "type": "about:blank",
        "status": status,
        "title": title,
        "detail": message,
        "code": code,
        "error": message,
    }
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_CONTENT_TYPE)


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_PART_CHARS else text[: _MAX_PART_CHARS - 3] + "..."


def _location(loc: Sequence[Any]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return _clip(path)


def validation_message(errors: Sequence[Any]) -> str:
    """``"query.podName: Field required; body.count: ..."``, bounded in size, without input values."""
    parts = [f"{_location(err.get('loc', ()))}: {_clip(str(err.get('msg', 'invalid')))}" for err in errors]
    if len(parts) > _MAX_FIELD_ERRORS:
        parts = [*parts[:_MAX_FIELD_ERRORS], f"and {len(parts) - _MAX_FIELD_ERRORS} more"]
    return "; ".join(parts) or "invalid request"


def _http_exception_code(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "http_error"


def install_error_handlers(
    app: FastAPI,
    style: ErrorStyle,
    *,
    max_request_bytes: int | None = None,
    status_map: Mapping[int, int] | None = None,
) -> None:
    """Register the handlers (and, with ``max_request_bytes``, a :class:`BodySizeLimitMiddleware`).

    ``status_map`` renumbers domain-error statuses for an API whose spec documents fewer codes
    (gpuctl's answers every server-side failure, a Kubernetes outage included, with 500).
    """
    remap = dict(status_map or {})

    async def on_gpuplane_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, GpuplaneError)
        if isinstance(exc, InternalError):
            logger.error("internal error: %s", exc.message, exc_info=exc)
            return error_response(exc.http_status, INTERNAL_MESSAGE, exc.code, style)
        if exc.http_status >= 500:
            logger.warning("request failed with %s: %s", exc.code, exc.message)
        return error_response(remap.get(exc.http_status, exc.http_status), exc.message, exc.code, style)

    async def on_validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        status, code = (400, "invalid_spec") if style == "simple" else (422, "unprocessable")
        return error_response(status, validation_message(exc.errors()), code, style)

    async def on_http_exception(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        phrase = _http_exception_code(exc.status_code)
        message = exc.detail if isinstance(exc.detail, str) and exc.detail else phrase.replace("_", " ")
        return error_response(exc.status_code, _clip(message), phrase, style, headers=exc.headers)

    async def on_unexpected(_: Request, exc: Exception) -> Response:
        logger.exception("unhandled exception", exc_info=exc)
        return error_response(500, INTERNAL_MESSAGE, InternalError.default_code, style)

    app.add_exception_handler(GpuplaneError, on_gpuplane_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_exception)
    # Starlette hands Exception handlers to its outermost ServerErrorMiddleware, which answers and
    # then re-raises (so the server logs it again). CatchAllMiddleware answers first, inside it.
    app.add_exception_handler(Exception, on_unexpected)
    app.add_middleware(CatchAllMiddleware, style=style)
    if max_request_bytes is not None:
        app.add_middleware(BodySizeLimitMiddleware, max_bytes=max_request_bytes, style=style)


class CatchAllMiddleware:
    """Turns any exception escaping the app into a logged, generic 500 without re-raising it."""

    def __init__(self, app: ASGIApp, *, style: ErrorStyle) -> None:
        self.app = app
        self.style = style

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except ClientDisconnect:
            logger.info("client disconnected during %s %s", scope.get("method"), scope.get("path"))
        except Exception:
            logger.exception("unhandled exception in %s %s", scope.get("method"), scope.get("path"))
            if started:  # too late for an error response; let the server drop the connection
                raise
            response = error_response(500, INTERNAL_MESSAGE, InternalError.default_code, self.style)
            await response(scope, receive, send)


class BodySizeLimitMiddleware:
    """Answers 413 for bodies over ``max_bytes`` without buffering them.

    A too-large ``Content-Length`` is refused before the app runs. For chunked or
    lying bodies the bytes are counted as the app reads them; at the first chunk
    over the limit the 413 is sent, the app is told the client disconnected (so it
    never sees the excess), and whatever it sends afterwards is dropped.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, style: ErrorStyle = "simple") -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.style = style

    def _too_large(self) -> Response:
        err = PayloadTooLarge(f"request body exceeds {self.max_bytes} bytes")
        return error_response(
            err.http_status, err.message, err.code, self.style, headers={"Connection": "close"}
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._too_large()(scope, receive, send)
                return

        received = 0
        response_started = False
        rejected = False

        async def send_wrapper(message: Message) -> None:
            nonlocal response_started
            if rejected:
                return
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        async def receive_wrapper() -> Message:
            nonlocal received, rejected
            if rejected:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    if not response_started:
                        await self._too_large()(scope, receive, send)
                    rejected = True
                    return {"type": "http.disconnect"}
            return message

        try:
            await self.app(scope, receive_wrapper, send_wrapper)
        except Exception:
            if not rejected:
                raise
            # Expected: the app tripped over the disconnect we simulated (ClientDisconnect); 413 is sent.
            logger.debug("app failed after its request body was rejected", exc_info=True)
