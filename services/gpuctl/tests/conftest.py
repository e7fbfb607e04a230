"""gpuctl test fixtures: a real gpuctl API server (uvicorn in a thread) on the devcluster."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from gpuctl_helpers import ServerThread, make_settings


@pytest.fixture(scope="session")
def gpuctl_url(devcluster: Any) -> Iterator[str]:
    with ServerThread(make_settings(devcluster)) as url:
        yield url


@pytest.fixture
async def api(gpuctl_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gpuctl_url + "/api/v1", timeout=30) as c:
        yield c
