"""Fixtures of the controller's cluster tests (helpers live in controller_testkit)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from controller_testkit import ControllerProc, GpuPool


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


@pytest.fixture
async def make_pool(kube_api: Any, make_gpu_nodes: Any) -> AsyncIterator[Any]:
    pools: list[GpuPool] = []

    async def make(nodes: int = 2, gpus_per_node: int = 2, **kw: Any) -> GpuPool:
        name = f"p-{secrets.token_hex(3)}"
        names = await make_gpu_nodes(nodes, labels={"test-pool": name})
        pool = GpuPool(kube_api, name, sorted(names))
        await pool.create(gpus_per_node, **kw)
        pools.append(pool)
        return pool

    yield make
    for p in pools:
        await p.delete()
