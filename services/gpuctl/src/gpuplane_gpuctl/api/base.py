"""`GET /` and `GET /health` as the public gpuctl documents them."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

router = APIRouter(tags=["base"])


@router.get("/")
async def root() -> dict[str, str]:
    return {"message": "GPU Control API", "version": "1.0.0"}


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "healthy", "timestamp": datetime.now(UTC).isoformat()}
