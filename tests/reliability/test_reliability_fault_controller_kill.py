"""Fault: the controller is SIGKILLed while 500 fractional pods are being scheduled.

What must hold after it restarts: every pod ends bound exactly once (one node, one set of GPUs,
one allocation), no GPU holds more than its capacity, `/api/allocation` equals what the pod
annotations say, the GPU objects' `status.available` agrees, and per-node indices never repeat.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from controller_testkit import ControllerProc, pod_manifest
from fault_kit import (
    assert_bound_once,
    bounded,
    count_bound,
    delete_pool,
    kill9,
    make_pool,
    wait_for,
    wait_placeable,
)
from kubernetes_asyncio import client

from devcluster.cluster import DevCluster

PODS = 500
NODES, GPUS_PER_NODE = 8, 2  # 16 GPUs x 100 TFLOPs / 80 GiB
TFLOPS, VRAM_GI = 3, 2  # 33 pods fit a GPU: 528 slots for 500 pods, so most GPUs end nearly full


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_sigkill_mid_burst_every_pod_bound_once_and_allocation_matches(
    devcluster: DevCluster, kube_api: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    pool = await make_pool(kube_api, NODES, GPUS_PER_NODE)
    proc = ControllerProc(str(devcluster.kubeconfig))
    proc.start()
    try:
        await wait_placeable(proc.url, pool)

        async def create(i: int) -> None:
            body = pod_manifest(
                f"f{i:03d}", pool.name, tflops_request=str(TFLOPS), vram_request=f"{VRAM_GI}Gi"
            )
            body["metadata"]["namespace"] = namespace
            await core.create_namespaced_pod(namespace, body)

        creating = asyncio.ensure_future(bounded([create(i) for i in range(PODS)], limit=16))
        # Kill once the burst is well under way: some pods bound, some in flight, most still coming.
        await wait_for(lambda: _at_least(count_bound(kube_api, namespace), 60), 120, "60 pods bound", 0.1)
        kill9(proc)
        at_kill = await count_bound(kube_api, namespace)
        assert at_kill < PODS - 100, f"the kill came too late to matter ({at_kill} already bound)"
        await creating
        proc.start()

        await wait_for(
            lambda: _at_least(count_bound(kube_api, namespace), PODS), 240, f"{PODS} pods bound", 1.0
        )
        await asyncio.sleep(1.0)  # a late wrong write gets the chance to show up
        assert len((await core.list_namespaced_pod(namespace)).items) == PODS
        await assert_bound_once(kube_api, proc.url, namespace, pool, TFLOPS, VRAM_GI)
    finally:
        proc.stop()
        await core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        await delete_pool(kube_api, pool)


async def _at_least(value: Any, floor: int) -> bool:
    return bool(await value >= floor)
