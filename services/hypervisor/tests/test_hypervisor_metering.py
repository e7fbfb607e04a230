"""Metering rows reach the local line-protocol file and a real HTTP write endpoint on loopback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web
from hypervisor_testkit import GIB, agent_of, allocation, load, running

from gpuplane_core.errors import UpstreamError
from gpuplane_hypervisor.settings import Settings


async def test_rows_go_to_the_file_and_are_posted(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    received: list[tuple[str, str]] = []
    status = {"code": 204}

    async def write(request: web.Request) -> web.Response:
        received.append((request.query_string, await request.text()))
        return web.Response(status=status["code"], text="nope" if status["code"] >= 300 else "")

    http = web.Application()
    http.router.add_post("/v1/influxdb/write", write)
    runner = web.AppRunner(http)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    metrics_file = tmp_path / "metrics.lp"
    try:
        settings = settings_factory(
            metrics_file=str(metrics_file),
            metrics_write_url=f"http://127.0.0.1:{port}/v1/influxdb/write?db=public",
            metrics_interval=3600,
            pool="pool-a",
            node_cost_per_hour=3.6,
        )
        async with running(settings) as (app, _):
            agent = agent_of(app)
            uuids = list(agent.devices)
            load(agent, allocation("uid-a", uuids[:2], vram_request=GIB, vram_limit=2 * GIB, workload="wl"))
            await agent.flush_metering()
            lines = metrics_file.read_text().splitlines()
            assert len(lines) == 2
            worker, node = lines
            assert worker.startswith(
                "tf_worker_resources,namespace=ns,pool=default,qos=medium,worker=pod-uid-a,workload=wl "
            )
            assert (
                "gpu_count=2i" in worker
                and "ready=false" in worker
                and "vram_bytes_limit=2147483648i" in worker
            )
            assert node.startswith("tf_node_metrics,node=gpu-node-0,phase=Running,pool=pool-a ")
            assert "allocated_tflops=200.0" in node and "gpu_count=4i" in node
            (query, body) = received[0]
            assert query == "db=public" and body.splitlines() == lines
            # A failing endpoint is an upstream error, never silent.
            status["code"] = 500
            with pytest.raises(UpstreamError, match="500"):
                await agent.flush_metering()
            assert len(metrics_file.read_text().splitlines()) == 4  # the local file still got its rows
    finally:
        await runner.cleanup()
