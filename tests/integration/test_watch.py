"""The resumable watch helper against a real apiserver: relist on 410, resume after outages."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio import client

from devcluster.cluster import DevCluster
from gpuplane_core.backoff import Backoff
from gpuplane_core.k8s.raw import list_json
from gpuplane_core.k8s.watch import WatchEvent, WatchHealth, resumable_watch

pytestmark = pytest.mark.cluster


async def _collect(agen: Any, queue: asyncio.Queue[WatchEvent]) -> None:
    async for ev in agen:
        await queue.put(ev)


async def _next(queue: asyncio.Queue[WatchEvent], timeout: float = 30) -> WatchEvent:
    return await asyncio.wait_for(queue.get(), timeout)


def _cm(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "data": {"k": "v"}}


async def test_list_then_watch_then_410_relists(
    kube_api: Any, namespace: str, devcluster: DevCluster
) -> None:
    core = client.CoreV1Api(kube_api)
    stale_rv = (await core.list_namespaced_config_map(namespace)).metadata.resource_version
    await core.create_namespaced_config_map(namespace, body=_cm("before"))
    # With etcd compacted past stale_rv and the apiserver's watch cache rebuilt by a
    # restart, a watch from stale_rv answers 410 Gone.
    await asyncio.to_thread(devcluster.compact_etcd)
    await asyncio.to_thread(devcluster.restart_component, "kube-apiserver")
    queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
    health = WatchHealth()
    task = asyncio.create_task(
        _collect(
            resumable_watch(
                core.list_namespaced_config_map, namespace=namespace, resource_version=stale_rv, health=health
            ),
            queue,
        )
    )
    try:
        first = await _next(queue)
        assert first.type == "RELISTED"
        assert "before" in {i.metadata.name for i in first.items}
        assert health.relists == 1
        await core.create_namespaced_config_map(namespace, body=_cm("after"))
        ev = await _next(queue)
        while ev.object is None or ev.object.metadata.name != "after":
            ev = await _next(queue)
        assert ev.type == "ADDED"
        await core.delete_namespaced_config_map("after", namespace)
        ev = await _next(queue)
        assert (ev.type, ev.object.metadata.name) == ("DELETED", "after")
    finally:
        task.cancel()


async def test_watch_resumes_after_apiserver_restart(
    kube_api: Any, namespace: str, devcluster: DevCluster
) -> None:
    core = client.CoreV1Api(kube_api)
    health = WatchHealth()
    queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
    task = asyncio.create_task(
        _collect(
            resumable_watch(
                core.list_namespaced_config_map,
                namespace=namespace,
                health=health,
                backoff=Backoff(initial=0.1, maximum=1.0),
            ),
            queue,
        )
    )
    try:
        assert (await _next(queue)).type == "RELISTED"
        await core.create_namespaced_config_map(namespace, body=_cm("one"))
        assert (await _next(queue)).object.metadata.name == "one"

        await asyncio.to_thread(devcluster.stop_component, "kube-apiserver")
        for _ in range(100):
            if not health.healthy:
                break
            await asyncio.sleep(0.1)
        assert not health.healthy and health.error
        await asyncio.to_thread(devcluster.restart_component, "kube-apiserver")

        await core.create_namespaced_config_map(namespace, body=_cm("two"))
        names = []
        while "two" not in names:
            ev = await _next(queue, timeout=60)
            names += (
                [i.metadata.name for i in ev.items] if ev.type == "RELISTED" else [ev.object.metadata.name]
            )
        assert health.healthy
        assert health.error is None
    finally:
        task.cancel()


async def test_an_error_answer_to_the_list_is_never_an_empty_list(
    kube_api: Any, namespace: str, devcluster: DevCluster, mint_token: Any
) -> None:
    """A list refused by the apiserver (403 here) must break the watch, never relist as empty:
    an informer that took it for "nothing exists" would drop every object it holds."""
    core = client.CoreV1Api(kube_api)
    await core.create_namespaced_config_map(namespace, body=_cm("exists"))
    cfg = client.Configuration()
    cfg.host = devcluster.server
    cfg.ssl_ca_cert = str(devcluster.pki.ca_cert) if devcluster.pki else None
    cfg.api_key = {"authorization": f"Bearer {await mint_token(namespace, 'no-rights')}"}
    async with client.ApiClient(configuration=cfg) as weak:
        weak_core = client.CoreV1Api(weak)

        async def raw_lister(**kw: Any) -> Any:  # the unchecked raw read the guard protects
            if kw.get("watch"):
                return await weak_core.list_namespaced_config_map(**kw)
            resp = await weak_core.list_namespaced_config_map(_preload_content=False, **kw)
            return json.loads(await resp.read())

        for lister in (list_json(weak_core.list_namespaced_config_map), raw_lister):
            queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
            health = WatchHealth()
            task = asyncio.create_task(
                _collect(resumable_watch(lister, namespace=namespace, health=health), queue)
            )
            try:
                for _ in range(100):
                    if health.error:
                        break
                    await asyncio.sleep(0.05)
                assert health.error is not None and "403" in health.error
                assert not health.healthy and queue.empty()  # no RELISTED with zero items
            finally:
                task.cancel()
