"""Helpers shared by the Lens tests (a unique module name: every `conftest` is called conftest)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import yaml

from gpuplane_lens.settings import Settings


class Lens:
    """A running Lens app (lifespan started) and an HTTP client bound to it."""

    def __init__(
        self, app: Any, client: httpx.AsyncClient, settings: Settings, stack: contextlib.AsyncExitStack
    ) -> None:
        self.app = app
        self.client = client
        self.settings = settings
        self.responses: list[httpx.Response] = []
        self._stack = stack

    async def stop(self) -> None:
        """Shut the app down (its lifespan exits) as a process stop would."""
        await self._stack.aclose()

    async def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        resp = await self.client.request(method, url, **kw)
        self.responses.append(resp)
        return resp

    async def register(
        self, name: str, kubeconfig: bytes, expect: int = 201, **fields: Any
    ) -> dict[str, Any]:
        data = {"name": name, **{k: str(v) for k, v in fields.items()}}
        resp = await self.request(
            "POST", "/api/cluster/clusters", data=data, files={"file": ("kubeconfig", kubeconfig)}
        )
        assert resp.status_code == expect, resp.text
        body: dict[str, Any] = resp.json()
        return body


MakeLens = Callable[..., Awaitable[Lens]]


def kubeconfig_with(server: str, *, token: str = "unused-token", insecure: bool = True) -> bytes:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": insecure}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    return yaml.safe_dump(doc).encode()


def problem(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = resp.json()
    assert body["status"] == status and body["code"] == code, body
    assert body["detail"] and body["error"] == body["detail"] and body["type"] == "about:blank"
    return body


async def poll(fn: Any, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await fn()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met; last value: {value}")
        await asyncio.sleep(0.3)
