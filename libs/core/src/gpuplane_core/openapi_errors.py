"""The error responses every route can give, written into the OpenAPI document.

FastAPI documents only the success response of a route and its own ``422``
``HTTPValidationError``, which is not what the shared handlers send: validation
errors are ``400 {"error"}`` in the ``simple`` style and ``422`` problem+json in
the ``problem`` style, and any route can answer 413 (body limit), 404 (unknown
object) or 5xx. This rewrites each operation's responses so a client (and a
schema fuzzer) sees the error shape and media type actually served.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from gpuplane_core.http_errors import PROBLEM_CONTENT_TYPE, ErrorStyle

_SIMPLE_ERROR = {
    "title": "Error",
    "type": "object",
    "properties": {"error": {"type": "string", "description": "What went wrong, for a person to read."}},
    "required": ["error"],
}
_PROBLEM = {
    "title": "Problem",
    "description": "RFC 7807 problem details; `error` repeats `detail`.",
    "type": "object",
    "properties": {
        "type": {"type": "string"},
        "status": {"type": "integer"},
        "title": {"type": "string"},
        "detail": {"type": "string"},
        "code": {"type": "string", "description": "Stable machine-readable error code."},
        "error": {"type": "string"},
    },
    "required": ["type", "status", "title", "detail", "code", "error"],
}
_FASTAPI_VALIDATION = "#/components/schemas/HTTPValidationError"


def _error_response(style: ErrorStyle, description: str) -> dict[str, Any]:
    name, media = ("Error", "application/json") if style == "simple" else ("Problem", PROBLEM_CONTENT_TYPE)
    schema = {"$ref": f"#/components/schemas/{name}"}
    return {"description": description, "content": {media: {"schema": schema}}}


def _uses_fastapi_validation(response: dict[str, Any]) -> bool:
    return any(
        media.get("schema", {}).get("$ref") == _FASTAPI_VALIDATION
        for media in response.get("content", {}).values()
    )


def document_error_responses(schema: dict[str, Any], style: ErrorStyle) -> dict[str, Any]:
    """Rewrite `schema` (an OpenAPI document) in place and return it."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Error" if style == "simple" else "Problem"] = _SIMPLE_ERROR if style == "simple" else _PROBLEM
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses: dict[str, Any] = operation["responses"]
            for code in [c for c, r in responses.items() if _uses_fastapi_validation(r)]:
                del responses[code]
            responses.setdefault(
                "4XX", _error_response(style, "The request was refused (invalid input, unknown object, ...).")
            )
            responses.setdefault("5XX", _error_response(style, "The server or an upstream failed."))
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    return schema


def install_error_docs(app: FastAPI, style: ErrorStyle) -> None:
    """Make `app.openapi()` return the document with the error responses written in."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_error_responses(generate(), style)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
