"""API calls that skip model deserialisation but keep error semantics.

With `_preload_content=False` kubernetes_asyncio returns the bare aiohttp response: a non-2xx
status raises nothing (an error Status would read as an empty list) and the connection stays
checked out until the body is read. `call_json` reads the body, releases the connection,
raises ApiException for non-2xx and returns the JSON as plain dicts (camelCase keys)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException


async def call_json(fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
    resp = await fn(*args, _preload_content=False, **kwargs)
    try:
        body = await resp.read()
    finally:
        resp.release()
    if not 200 <= resp.status <= 299:
        err = ApiException(status=resp.status, reason=resp.reason or "")
        err.body = body.decode(errors="replace")
        raise err
    out: dict[str, Any] = json.loads(body) if body else {}
    return out


def list_json(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A list function for `resumable_watch`: lists as plain dicts, watches as the client does.

    No docstring on the returned function on purpose: kubernetes_asyncio's Watch reads the model
    type from the list function's docstring, and without one it hands out the events' dicts."""

    async def list_or_watch(*args: Any, **kw: Any) -> Any:
        if kw.get("watch"):
            return await fn(*args, **kw)
        return await call_json(fn, *args, **kw)

    return list_or_watch
