"""Shared route helpers: the agent on app.state and the ``{"data": ...}`` envelope."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from gpuplane_hypervisor.agent import Agent


def get_agent(request: Request) -> Agent:
    agent: Agent = request.app.state.agent
    return agent


def envelope(data: Any) -> JSONResponse:
    """``{"data": ...}``, rendered directly: the shapes are plain JSON already, so FastAPI's
    response validation and encoding pass would only add latency."""
    return JSONResponse({"data": data})


def cached_json(agent: Agent, key: str, build: Callable[[], Any]) -> Response:
    """``{"data": build()}``, encoded once per agent generation (listings change rarely, are read often)."""
    hit = agent.render_cache.get(key)
    if hit is None or hit[0] != agent.generation:
        body = json.dumps({"data": build()}, separators=(",", ":"), ensure_ascii=False).encode()
        hit = (agent.generation, body)
        agent.render_cache[key] = hit
    return Response(hit[1], media_type="application/json")
