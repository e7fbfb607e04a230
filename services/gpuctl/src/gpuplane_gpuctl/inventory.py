"""Read and change nodes, pools and labels: the cache, the cluster and the controller together.

Routes call these; the computing is in domain/inventory.py and domain/labels.py.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from gpuplane_core.errors import Conflict, GpuplaneError, InvalidSpec, NotFound
from gpuplane_gpuctl.domain.inventory import (
    A_POOL_DESCRIPTION,
    Gpu,
    NodeRow,
    NodeUse,
    PodUse,
    add_shared,
    node_row,
    pool_views,
    usage_by_node,
)
from gpuplane_gpuctl.domain.labels import POOL_LABEL, check_changeable, validate_value
from gpuplane_gpuctl.grpc.capacity import CapacityClient
from gpuplane_gpuctl.ports import Inventory as InventoryCache
from gpuplane_gpuctl.ports import NodeStore as ClusterRepo

log = logging.getLogger(__name__)
CONTROLLER_WAIT_S = 2.0


@dataclass
class Snapshot:
    nodes: list[NodeRow]
    usage: dict[str, NodeUse]
    pending: list[PodUse]  # unfinished pods not yet on a node
    gpus: list[Gpu] | None  # the controller's GPUs, None without one
    controller: str  # "ok", "not configured" or "unavailable: ..."


async def snapshot(cache: InventoryCache, capacity: CapacityClient | None) -> Snapshot:
    await cache.wait_synced()
    pods = list(cache.pod_uses())
    nodes, usage = cache.node_rows(), usage_by_node(pods)
    pending = [p for p in pods if p.node is None]
    gpus, note = None, "not configured"
    if capacity is not None:
        try:
            # Bounded: a slow controller must not make every node listing slow.
            gpus = await asyncio.wait_for(capacity.allocations(), CONTROLLER_WAIT_S)
            add_shared(usage, gpus)
            note = "ok"
        except TimeoutError:
            log.warning("controller allocations timed out after %ss", CONTROLLER_WAIT_S)
            note = f"unavailable: no answer within {CONTROLLER_WAIT_S}s"
        except GpuplaneError as e:
            # Whole-GPU numbers from the cluster are still right; say what is missing.
            log.warning("controller allocations unavailable: %s", e.message)
            note = f"unavailable: {e.message}"
    return Snapshot(nodes, usage, pending, gpus, note)


def pool_or_404(snap: Snapshot, name: str) -> dict[str, Any]:
    for p in pool_views(snap.nodes, snap.usage, snap.pending):
        if p["name"] == name:
            return p
    raise NotFound(f"pool {name} not found")


def validate_pool_name(name: str, field: str = "name") -> str:
    if not name:
        raise InvalidSpec(f"{field}: pool name must not be empty", field=field)
    return validate_value(name, field)


async def set_pool(
    repo: ClusterRepo,
    cache: InventoryCache,
    node: str,
    pool: str | None,
    description: str | None = None,
    *,
    expect_pool: str | None = None,
) -> dict[str, Any]:
    """Put `node` in `pool` (None: take it out of `expect_pool`); 404/409 per the node's current pool."""

    def decide(n: dict[str, Any]) -> tuple[dict[str, str | None], dict[str, str | None]]:
        current = (n["metadata"].get("labels") or {}).get(POOL_LABEL)
        if pool is None:
            if current != expect_pool:
                raise NotFound(f"node {node} is not in pool {expect_pool}")
            return {POOL_LABEL: None}, {A_POOL_DESCRIPTION: None}
        if current == pool:
            return {}, ({A_POOL_DESCRIPTION: description} if description else {})
        if current:
            raise Conflict(f"node {node} is already in pool {current}", field="nodes")
        return {POOL_LABEL: pool}, ({A_POOL_DESCRIPTION: description} if description else {})

    patched = await repo.change_node(node, decide)
    cache.put_node(patched)
    return patched


async def set_label(
    repo: ClusterRepo,
    cache: InventoryCache,
    node: str,
    key: str,
    value: str | None,
    *,
    mode: str,
) -> dict[str, Any]:
    """mode: "add" (409 if present), "overwrite", "update" (404 if absent) or "delete" (404 if absent)."""
    check_changeable(key)
    if value is not None:
        validate_value(value)

    def decide(n: dict[str, Any]) -> tuple[dict[str, str | None], dict[str, str | None]]:
        labels = n["metadata"].get("labels") or {}
        if mode == "add" and key in labels:
            raise Conflict(
                f"label {key} already exists on node {node} (value {labels[key]!r}); "
                "set overwrite to replace it",
                field="key",
            )
        if mode in ("update", "delete") and key not in labels:
            raise NotFound(f"label {key} not found on node {node}", field="key")
        if value is not None and labels.get(key) == value:
            return {}, {}
        return {key: value}, {}

    patched = await repo.change_node(node, decide)
    cache.put_node(patched)
    return patched


async def fresh_node(repo: ClusterRepo, cache: InventoryCache, name: str) -> NodeRow:
    node = await repo.read_node(name)
    cache.put_node(node)
    return node_row(node)
