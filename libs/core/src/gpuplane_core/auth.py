"""Bearer-token authentication for component endpoints.

Tokens are verified by a `TokenReviewer` (TokenReview against the apiserver,
see `k8s.tokenreview`), never by decoding the JWT. Results are cached for a
bounded time under the token's SHA-256, so the raw token is never stored, and
concurrent requests with the same token share one review.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

from fastapi import Request

from gpuplane_core.errors import Unauthorized

POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
POD_UID_KEY = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class Identity:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def pod_name(self) -> str | None:
        v = self.extra.get(POD_NAME_KEY)
        return v[0] if v else None

    @property
    def pod_uid(self) -> str | None:
        v = self.extra.get(POD_UID_KEY)
        return v[0] if v else None

    @property
    def service_account(self) -> tuple[str, str] | None:
        """(namespace, name) when the caller is a ServiceAccount."""
        if not self.username.startswith(SA_PREFIX):
            return None
        ns, _, name = self.username[len(SA_PREFIX) :].partition(":")
        return (ns, name) if ns and name else None


class TokenReviewer(Protocol):
    async def review(self, token: str) -> Identity:
        """Return the identity or raise `Unauthorized`."""
        ...


class CachedReviewer:
    """Bounded TTL + LRU cache in front of a reviewer; only successes are cached."""

    def __init__(self, inner: TokenReviewer, ttl: float = 60.0, max_entries: int = 10_000) -> None:
        self._inner = inner
        self._ttl = ttl
        self._max = max_entries
        self._cache: OrderedDict[str, tuple[float, Identity]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[Identity]] = {}

    async def review(self, token: str) -> Identity:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit and hit[0] > now:
            self._cache.move_to_end(key)
            return hit[1]
        if key in self._inflight:
            return await asyncio.shield(self._inflight[key])
        fut: asyncio.Future[Identity] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            ident = await self._inner.review(token)
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved: waiters may be none
            raise
        finally:
            self._inflight.pop(key, None)
        fut.set_result(ident)
        self._cache[key] = (now + self._ttl, ident)
        self._cache.move_to_end(key)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return ident


def bearer_token(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing bearer token")
    return token.strip()


async def require_identity(request: Request) -> Identity:
    """FastAPI dependency: the reviewed identity of the caller, or 401.

    The app must put a `TokenReviewer` on `app.state.token_reviewer` in its lifespan.
    """
    reviewer: TokenReviewer = request.app.state.token_reviewer
    return await reviewer.review(bearer_token(request))
