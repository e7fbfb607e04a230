"""Informer-style watch: list, then watch from the list's resourceVersion,
resume from the last seen resourceVersion after disconnects (with backoff),
and relist on 410 Gone. Consumers see a `RELISTED` event carrying the whole
list whenever their cache must be rebuilt, then ADDED/MODIFIED/DELETED.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_core.backoff import Backoff

log = logging.getLogger(__name__)

EventType = Literal["RELISTED", "ADDED", "MODIFIED", "DELETED"]


@dataclass
class WatchEvent:
    type: EventType
    object: Any = None
    items: list[Any] = field(default_factory=list)


@dataclass
class WatchHealth:
    """Readiness signal: False while the watch is broken (readyz can report it)."""

    healthy: bool = False
    error: str | None = None
    relists: int = 0


def _rv(obj: Any) -> str | None:
    if isinstance(obj, dict):
        rv = obj.get("metadata", {}).get("resourceVersion")
    else:
        rv = getattr(getattr(obj, "metadata", None), "resource_version", None)
    return str(rv) if rv else None


def _items(lst: Any) -> tuple[list[Any], str | None]:
    if isinstance(lst, dict):
        if lst.get("kind") == "Status" or "items" not in lst:
            # An error answer read without status checks must never pass as "nothing exists":
            # an informer would drop every object (and a scheduler release every allocation).
            raise ApiException(status=int(lst.get("code") or 0), reason=str(lst.get("message") or lst))
        return list(lst.get("items") or []), lst.get("metadata", {}).get("resourceVersion")
    return list(lst.items or []), lst.metadata.resource_version


_RETRYABLE = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


async def resumable_watch(
    list_fn: Callable[..., Awaitable[Any]],
    *,
    backoff: Backoff | None = None,
    timeout_seconds: int = 300,
    health: WatchHealth | None = None,
    resource_version: str | None = None,
    **kwargs: Any,
) -> AsyncIterator[WatchEvent]:
    """Yield events forever; cancel the consuming task to stop.

    `resource_version` resumes a previous watch instead of starting with a list.
    """
    backoff = backoff or Backoff()
    health = health or WatchHealth()
    rv = resource_version
    delays = backoff.delays()
    while True:
        # Exceptions raised in the consumer's loop body never enter this
        # generator, so yielding inside the try only catches our own I/O errors.
        try:
            if rv is None:
                items, rv = _items(await list_fn(**kwargs))
                health.relists += 1
                health.healthy, health.error = True, None
                yield WatchEvent("RELISTED", items=items)
            it = watch.Watch().stream(
                list_fn,
                resource_version=rv,
                timeout_seconds=timeout_seconds,
                allow_watch_bookmarks=True,
                **kwargs,
            )
            async with it:
                health.healthy, health.error = True, None
                delays = backoff.delays()
                async for raw in it:
                    new_rv = _rv(raw["object"])
                    if new_rv:
                        rv = new_rv
                    if raw["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        yield WatchEvent(raw["type"], raw["object"])
            continue  # the server ended the watch (timeout): resume from rv
        except ApiException as e:
            if e.status == 410:
                log.info("watch expired (410 Gone); relisting", extra={"resource": _name(list_fn)})
                rv = None
                continue
            _mark_broken(health, f"Kubernetes API error {e.status}: {e.reason}")
        except _RETRYABLE as e:
            _mark_broken(health, f"{type(e).__name__}: {e}")
        delay = next(delays)
        log.warning(
            "watch broken; retrying",
            extra={"resource": _name(list_fn), "error": health.error, "delay": round(delay, 2)},
        )
        await asyncio.sleep(delay)


def _mark_broken(health: WatchHealth, error: str) -> None:
    health.healthy = False
    health.error = error


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", repr(fn))
