"""Diagnostic endpoints of the node scaler and the dynamic config (no auth; ClusterIP only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

router = APIRouter()


@router.get("/api/node-scaler", response_model=None)
async def node_scaler(request: Request) -> dict[str, Any] | JSONResponse:
    expander = getattr(request.app.state, "expander", None)
    if expander is None:
        return JSONResponse({"error": "node scaler not enabled"}, status_code=503)
    return {"data": expander.info()}


@router.get("/api/config", response_model=None)
async def dynamic_config(request: Request) -> dict[str, Any] | JSONResponse:
    source = getattr(request.app.state, "dynconfig", None)
    if source is None:
        return JSONResponse({"error": "dynamic config not loaded yet"}, status_code=503)
    config: dict[str, Any] = source.current.as_json()
    return {"config": config}
