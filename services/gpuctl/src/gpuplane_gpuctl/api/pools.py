"""/api/v1/pools: a pool is the set of nodes labelled runwhere.ai/pool=<name>."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from gpuplane_core.errors import Conflict, InvalidSpec, NotFound
from gpuplane_gpuctl.domain.inventory import node_item, pool_views
from gpuplane_gpuctl.inventory import fresh_node, pool_or_404, set_pool, snapshot, validate_pool_name

router = APIRouter(prefix="/api/v1/pools", tags=["pools"])


class CreatePool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: Annotated[str, Field(max_length=1024)] | None = None
    nodes: Annotated[list[str], Field(min_length=1, max_length=1000)]
    gpuType: list[str] | None = None


@router.get("")
async def list_pools(request: Request) -> list[dict[str, Any]]:
    st = request.app.state
    snap = await snapshot(st.inventory, st.capacity)
    return pool_views(snap.nodes, snap.usage, snap.pending)


@router.get("/{poolName}")
async def get_pool(poolName: str, request: Request) -> dict[str, Any]:
    st = request.app.state
    snap = await snapshot(st.inventory, st.capacity)
    pool = pool_or_404(snap, poolName)
    members = sorted((n for n in snap.nodes if n.pool == poolName), key=lambda n: n.name)
    jobs = await st.cluster.workloads_in_pool(poolName)
    return {
        **pool,
        "nodeDetails": [node_item(n, snap.usage.get(n.name)) for n in members],
        "jobs": jobs,
        "controller": snap.controller,
    }


@router.post("", status_code=201)
async def create_pool(body: CreatePool, request: Request) -> dict[str, Any]:
    st = request.app.state
    validate_pool_name(body.name)
    if len(set(body.nodes)) != len(body.nodes):
        raise InvalidSpec("nodes: a node is listed twice", field="nodes")
    await st.inventory.wait_synced()
    if any(n.pool == body.name for n in st.inventory.node_rows()):
        raise Conflict(f"pool {body.name} already exists", field="name")
    # Check every node before changing any, so a bad request changes nothing.
    for i, name in enumerate(body.nodes):
        row = st.inventory.nodes.get(name)
        if row is None:
            try:
                row = await fresh_node(st.cluster, st.inventory, name)
            except NotFound:
                raise NotFound(f"node {name} not found", field=f"nodes[{i}]") from None
        if row.pool:
            raise Conflict(f"node {name} is already in pool {row.pool}", field=f"nodes[{i}]")
        if body.gpuType and row.gpu_type not in body.gpuType:
            raise InvalidSpec(
                f"node {name} has GPU type {row.gpu_type or 'none'}, not one of {', '.join(body.gpuType)}",
                field=f"nodes[{i}]",
            )
    for name in body.nodes:
        await set_pool(st.cluster, st.inventory, name, body.name, body.description)
    snap = await snapshot(st.inventory, st.capacity)
    return pool_or_404(snap, body.name)


@router.delete("/{poolName}")
async def delete_pool(poolName: str, request: Request) -> dict[str, Any]:
    st = request.app.state
    await st.inventory.wait_synced()
    members = sorted(n.name for n in st.inventory.node_rows() if n.pool == poolName)
    if not members:
        raise NotFound(f"pool {poolName} not found")
    jobs = await st.cluster.workloads_in_pool(poolName)
    if jobs:
        shown = ", ".join(jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "")
        raise Conflict(f"pool {poolName} still has jobs: {shown}; delete them first")
    for name in members:
        try:
            await set_pool(st.cluster, st.inventory, name, None, expect_pool=poolName)
        except NotFound:
            pass  # the node left the pool (or the cluster) meanwhile
    return {"name": poolName, "status": "deleted", "nodes": members}
