"""Sinks for the metering rows: a local line-protocol file and an optional HTTP write endpoint."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp

from gpuplane_core.errors import UpstreamError

log = logging.getLogger(__name__)


class LineFileSink:
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, payload: str) -> None:
        with self.path.open("a") as f:
            f.write(payload)


class HttpWriteSink:
    """POSTs line protocol to an InfluxDB (``/write?db=``) or GreptimeDB (``/v1/influxdb/write``) URL."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))

    async def write(self, payload: str) -> None:
        try:
            async with self._session.post(
                self.url, data=payload.encode(), headers={"Content-Type": "text/plain; charset=utf-8"}
            ) as resp:
                if resp.status >= 300:
                    text = (await resp.text())[:200]
                    raise UpstreamError(f"metrics write answered {resp.status}: {text}")
        except aiohttp.ClientError as e:
            raise UpstreamError(f"metrics write failed: {e}") from e

    async def close(self) -> None:
        await self._session.close()
