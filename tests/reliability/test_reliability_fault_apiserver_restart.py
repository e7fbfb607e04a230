"""Fault: kube-apiserver restarted while fractional pods are being created and scheduled.

What must hold: the controller's and gpuctl's `/readyz` go unready while their watches are broken
and ready again once they resume; no pod is missed (every pod created before, during and after
the restart is bound, and gpuctl's job list shows each with its node); no allocation is doubled
(the controller holds exactly what the pod annotations say, no GPU over capacity).

The restart runs on a cluster of its own (`<test cluster>-api`): the session cluster stays up
for the other tests.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import httpx
import pytest
from controller_testkit import ControllerProc, pod_manifest
from fault_kit import (
    assert_bound_once,
    bounded,
    count_bound,
    delete_pool,
    make_pool,
    wait_for,
    wait_placeable,
)
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from devcluster.cluster import DevCluster
from devcluster.k8s_ops import api_client, wait_default_serviceaccount
from devcluster.pytest_plugin import TEST_CLUSTER
from devcluster.services import ServiceProcess

PODS = 200
TFLOPS, VRAM_GI = 5, 2


@pytest.fixture(scope="module")
def api_cluster() -> Iterator[DevCluster]:
    cluster = DevCluster(f"{TEST_CLUSTER}-api")
    cluster.up(gpu_nodes=0, cpu_nodes=1)
    yield cluster
    if os.environ.get("GPUPLANE_KEEP_DEVCLUSTER") != "1":
        cluster.down()


@pytest.fixture
async def api(api_cluster: DevCluster) -> AsyncIterator[Any]:
    a = await api_client(api_cluster.kubeconfig)
    try:
        yield a
    finally:
        await a.close()


async def _retrying(op: Any, deadline: float) -> None:
    """Create through an apiserver that may be down: retry until it answers; 409 means done."""
    while True:
        try:
            await op()
            return
        except ApiException as e:
            if e.status == 409:
                return  # an earlier attempt went through before the connection dropped
            if (e.status < 500 and e.status not in (0, 429)) or time.monotonic() > deadline:
                raise
        except (TimeoutError, aiohttp.ClientError, OSError):
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


class ReadyzLog:
    """Polls /readyz of each service and remembers every status it saw."""

    def __init__(self, urls: dict[str, str]) -> None:
        self.urls = urls
        self.seen: dict[str, list[int]] = {k: [] for k in urls}
        self._stop = asyncio.Event()

    async def run(self) -> None:
        await asyncio.gather(*(self._poll(name, url) for name, url in self.urls.items()))

    async def _poll(self, name: str, url: str) -> None:
        # A generous timeout: on a loaded machine an apiserver start can starve the services for
        # seconds, and an unanswered probe (0) says nothing about readiness.
        async with httpx.AsyncClient(timeout=5) as http:
            while not self._stop.is_set():
                try:
                    code = (await http.get(f"{url}/readyz")).status_code
                except httpx.HTTPError:
                    code = 0
                self.seen[name].append(code)
                await asyncio.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_apiserver_restart_under_load_watches_resume_nothing_missed_nothing_doubled(
    api_cluster: DevCluster, api: Any
) -> None:
    core = client.CoreV1Api(api)
    ns = f"apirestart-{int(time.time())}"
    await core.create_namespace({"metadata": {"name": ns}})
    await wait_default_serviceaccount(api, namespace=ns)
    pool = await make_pool(api, 4, 4)  # 16 GPUs x 20 pods of 5 TFLOPs = 320 slots
    kubeconfig = str(api_cluster.kubeconfig)
    controller = ControllerProc(kubeconfig)
    gpuctl = ServiceProcess("gpuctl-server", "GPUPLANE_GPUCTL_", kubeconfig)
    readyz = ReadyzLog({"controller": controller.url, "gpuctl": gpuctl.url})
    try:
        controller.start()
        gpuctl.start()
        await wait_placeable(controller.url, pool)
        deadline = time.monotonic() + 300

        async def create(i: int) -> None:
            body = pod_manifest(
                f"a{i:03d}", pool.name, tflops_request=str(TFLOPS), vram_request=f"{VRAM_GI}Gi"
            )
            body["metadata"]["namespace"] = ns
            body["metadata"]["labels"]["runwhere.ai/job-type"] = "compute"  # gpuctl's pod cache sees it
            await _retrying(lambda: core.create_namespaced_pod(ns, body), deadline)

        creating = asyncio.ensure_future(bounded([create(i) for i in range(PODS)], limit=8))
        await wait_for(lambda: _at_least(count_bound(api, ns), 30), 120, "30 pods bound", 0.1)
        polling = asyncio.ensure_future(readyz.run())
        at_restart = await count_bound(api, ns)
        assert at_restart < PODS - 50, f"the restart came too late to matter ({at_restart} bound)"
        await asyncio.to_thread(api_cluster.restart_component, "kube-apiserver")
        await creating

        try:
            await wait_for(lambda: _at_least(count_bound(api, ns), PODS), 180, f"{PODS} pods bound", 1.0)
        except AssertionError:
            pods = (await core.list_namespaced_pod(ns)).items
            left = [
                (p.metadata.name, [c.message for c in p.status.conditions or []])
                for p in pods
                if not p.spec.node_name
            ]
            raise AssertionError(f"{len(left)} pods never bound: {left[:5]}") from None

        async def both_ready() -> bool:
            return all(s and s[-1] == 200 for s in readyz.seen.values())

        await wait_for(both_ready, 60, "controller and gpuctl ready again")
        readyz.stop()
        await polling
        for name, seen in readyz.seen.items():
            assert 503 in seen, f"{name} /readyz never reported the broken watch: {sorted(set(seen))}"

        await asyncio.sleep(1.0)
        await assert_bound_once(api, controller.url, ns, pool, TFLOPS, VRAM_GI)

        # gpuctl's pod informer missed nothing either: every pod, with the node it was bound to.
        pods = {p.metadata.name: p.spec.node_name for p in (await core.list_namespaced_pod(ns)).items}

        async def gpuctl_agrees() -> bool | dict[str, Any]:
            seen: dict[str, Any] = {}
            async with httpx.AsyncClient(timeout=10) as http:
                for page in (1, 2):
                    r = await http.get(
                        f"{gpuctl.url}/api/v1/jobs", params={"namespace": ns, "pageSize": 100, "page": page}
                    )
                    seen.update({j["jobId"]: j["node"] for j in r.json()["items"]})
            return seen == pods or seen

        await wait_for(gpuctl_agrees, 30, "gpuctl's job list matching the pods")
    finally:
        readyz.stop()
        gpuctl.stop()
        controller.stop()
        await core.delete_namespace(ns)
        await delete_pool(api, pool)


async def _at_least(value: Any, floor: int) -> bool:
    return bool(await value >= floor)
