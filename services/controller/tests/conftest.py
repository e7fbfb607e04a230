"""Fixtures of the controller's cluster tests (helpers live in controller_testkit)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from controller_testkit import ControllerProc, GpuPool, pod_manifest


@pytest.fixture
def controller(devcluster: Any) -> Iterator[ControllerProc]:
    proc = ControllerProc(str(devcluster.kubeconfig))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as c:
        yield c


async def _wait_controller_sees(controller: ControllerProc, pool: GpuPool, timeout: float = 30) -> None:
    """Pods created before the controller's informers saw every GPU of the pool could land elsewhere."""
    want = {g for gpus in pool.gpus.values() for g in gpus}
    deadline = asyncio.get_running_loop().time() + timeout
    async with httpx.AsyncClient(timeout=5) as http:
        while True:
            store = (await http.get(f"{controller.url}/api/allocation")).json()["gpuStore"]
            missing = sorted(want - set(store))
            # ... and every node with GPUs as Ready: a tiny pod pinned to it must fit there.
            unusable = [
                n
                for n in pool.nodes
                if pool.gpus.get(n) and not missing and not await _fits_on(http, controller, pool, n)
            ]
            if not missing and not unusable:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(
                    f"controller did not see GPUs {missing} / nodes {unusable} in {timeout}s"
                )
            await asyncio.sleep(0.1)


async def _fits_on(http: httpx.AsyncClient, controller: ControllerProc, pool: GpuPool, node: str) -> bool:
    probe = pod_manifest("probe", pool.name, tflops_request="1", vram_request="1Mi")
    probe["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    r = await http.post(f"{controller.url}/api/simulate-schedule", json=probe)
    return r.status_code == 200 and r.json()["error"] is None


@pytest.fixture
async def make_pool(kube_api: Any, make_gpu_nodes: Any, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    pools: list[GpuPool] = []

    async def make(nodes: int = 2, gpus_per_node: int = 2, **kw: Any) -> GpuPool:
        name = f"p-{secrets.token_hex(3)}"
        names = await make_gpu_nodes(nodes, labels={"test-pool": name})
        pool = GpuPool(kube_api, name, sorted(names))
        await pool.create(gpus_per_node, **kw)
        pools.append(pool)
        if "controller" in request.fixturenames:
            await _wait_controller_sees(request.getfixturevalue("controller"), pool)
        return pool

    yield make
    for p in pools:
        await p.delete()
