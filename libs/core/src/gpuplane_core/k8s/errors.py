"""`ApiException` → the domain error hierarchy, translated in exactly one place."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_core.errors import (
    Conflict,
    Forbidden,
    GpuplaneError,
    InvalidSpec,
    NotFound,
    NotReady,
    Timeout,
    Unprocessable,
    UpstreamError,
)


def status_message(e: ApiException) -> str:
    """The human message of a Kubernetes Status body, else the HTTP reason."""
    try:
        body = json.loads(e.body) if e.body else {}
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (TypeError, ValueError):
        pass
    return str(e.reason or f"Kubernetes API error {e.status}")


def translate_api_exception(e: ApiException, what: str | None = None) -> GpuplaneError:
    msg = status_message(e)
    if what and e.status == 404:
        msg = f"{what} not found"
    status = e.status or 0
    if status == 400:
        return InvalidSpec(msg)
    if status == 403:
        return Forbidden(msg)
    if status == 404:
        return NotFound(msg)
    if status == 409:
        return Conflict(msg)
    if status == 422:
        return Unprocessable(msg)
    if status == 429:
        return NotReady(f"Kubernetes API is throttling: {msg}")
    if status == 504:
        return Timeout(f"Kubernetes API timed out: {msg}")
    # 401 means our own credentials are bad, 5xx the apiserver failed: not the caller's fault.
    return UpstreamError(f"Kubernetes API error ({status}): {msg}")


@asynccontextmanager
async def k8s_errors(what: str | None = None) -> AsyncIterator[None]:
    """`async with k8s_errors("pool x"):` around Kubernetes calls in adapters."""
    try:
        yield
    except ApiException as e:
        raise translate_api_exception(e, what) from e
