"""Asynchronous setup steps against the running apiserver: CRDs and nodes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from devcluster.nodes import MANAGED_LABEL, NodeShape, cpu_node, gpu_node

Progress = Callable[[str], None]


async def api_client(kubeconfig: Path) -> client.ApiClient:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = 64
    return client.ApiClient(configuration=cfg)


async def _bounded(coros: Iterable[Awaitable[Any]], limit: int) -> None:
    sem = asyncio.Semaphore(limit)

    async def run(c: Awaitable[Any]) -> None:
        async with sem:
            await c

    await asyncio.gather(*(run(c) for c in coros))


async def apply_crds(
    api: client.ApiClient, crd_dir: Path, progress: Progress, timeout: float = 60
) -> list[str]:
    ext = client.ApiextensionsV1Api(api)
    names: list[str] = []
    for path in sorted(crd_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            name = doc["metadata"]["name"]
            names.append(name)
            try:
                await ext.create_custom_resource_definition(body=doc)
            except ApiException as e:
                if e.status != 409:
                    raise
                current = await ext.read_custom_resource_definition(name)
                doc["metadata"]["resourceVersion"] = current.metadata.resource_version
                await ext.replace_custom_resource_definition(name, body=doc)
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = await ext.read_custom_resource_definition(name)
            conds = {c.type: c.status for c in (crd.status.conditions or [])}
            if conds.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout}s: {conds}")
            await asyncio.sleep(0.2)
    progress(f"installed {len(names)} CRDs from {crd_dir}")
    return names


async def ensure_nodes(
    api: client.ApiClient,
    *,
    gpu_nodes: int,
    shape: NodeShape,
    cpu_nodes: int,
    progress: Progress,
    prefix: str = "gpu-node",
    concurrency: int = 32,
) -> list[str]:
    """Make exactly these devcluster-managed nodes exist; returns their names."""
    core = client.CoreV1Api(api)
    want = {f"{prefix}-{i}": gpu_node(f"{prefix}-{i}", shape) for i in range(gpu_nodes)}
    want.update({f"cpu-node-{i}": cpu_node(f"cpu-node-{i}") for i in range(cpu_nodes)})
    existing = await core.list_node(label_selector=f"{MANAGED_LABEL}=true")
    have = {n.metadata.name for n in existing.items}
    stale = have - set(want)
    missing = [body for name, body in want.items() if name not in have]
    await _bounded((core.delete_node(n) for n in stale), concurrency)
    if missing:
        progress(f"creating {len(missing)} nodes")
    await _bounded((create_node(core, body) for body in missing), concurrency)
    return list(want)


async def create_node(core: client.CoreV1Api, body: dict[str, Any]) -> None:
    created = await core.create_node(body=body)
    # Status sent on create is kept by the apiserver, but make sure the GPU
    # capacity is there before kwok's initialize stage copies it.
    if created.status is None or not created.status.capacity:
        await core.patch_node_status(body["metadata"]["name"], body={"status": body["status"]})


async def wait_nodes_ready(
    api: client.ApiClient, names: list[str], progress: Progress, timeout: float
) -> None:
    core = client.CoreV1Api(api)
    want = set(names)
    deadline = time.monotonic() + timeout
    last = -1
    while True:
        nodes = await core.list_node(label_selector=f"{MANAGED_LABEL}=true")
        ready = {
            n.metadata.name
            for n in nodes.items
            if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
        }
        done = len(want & ready)
        if done != last:
            progress(f"nodes Ready: {done}/{len(want)}")
            last = done
        if done == len(want):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {done}/{len(want)} nodes Ready after {timeout}s")
        await asyncio.sleep(0.5)


async def wait_default_serviceaccount(
    api: client.ApiClient, timeout: float = 60, namespace: str = "default"
) -> None:
    """The ServiceAccount controller creates `default` in each namespace; pods need it."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while True:
        try:
            await core.read_namespaced_service_account("default", namespace)
            return
        except ApiException as e:
            if e.status != 404 or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)
