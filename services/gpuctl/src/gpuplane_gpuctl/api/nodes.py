"""/api/v1/nodes and /api/v1/labels: node inventory, pool membership and node labels.

Fixed paths (/nodes/gpu-detail, /nodes/labels...) are declared before /nodes/{nodeName}.
Label keys contain '/', so they are matched as path remainders.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from gpuplane_core.errors import GpuplaneError, InvalidSpec, NotFound
from gpuplane_gpuctl.domain.inventory import (
    filter_nodes,
    gpu_detail,
    gpu_labels,
    labels_overview,
    node_detail,
    node_page,
)
from gpuplane_gpuctl.domain.labels import check_changeable, validate_key, validate_value
from gpuplane_gpuctl.inventory import fresh_node, set_label, set_pool, snapshot, validate_pool_name

router = APIRouter(prefix="/api/v1", tags=["nodes"])

MAX_BATCH_NODES = 1000


class AddLabel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str
    value: str
    overwrite: bool = False


class UpdateLabel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: str


class BatchLabels(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nodeNames: Annotated[list[str], Field(min_length=1, max_length=MAX_BATCH_NODES)]
    labels: Annotated[dict[str, str], Field(min_length=1, max_length=64)]
    overwrite: bool = False


class JoinPool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pool: str


def _label_doc(node: str, key: str, value: str | None) -> dict[str, Any]:
    return {"nodeName": node, "key": key, "value": value}


# ---- lists ---------------------------------------------------------------------------------


@router.get("/nodes", response_model=None)
async def list_nodes(
    request: Request,
    pool: str | None = None,
    gpuType: str | None = None,
    status: str | None = None,
    page: Annotated[int, Query(ge=1)] = 1,
    pageSize: Annotated[int, Query(ge=1, le=1000)] = 20,
) -> JSONResponse:
    st = request.app.state
    snap = await snapshot(st.inventory, st.capacity)
    nodes = filter_nodes(snap.nodes, pool, gpuType, status)
    return JSONResponse(node_page(nodes, snap.usage, page, pageSize))


@router.get("/nodes/gpu-detail")
async def gpu_details(request: Request, nodeName: str | None = None) -> dict[str, Any]:
    st = request.app.state
    snap = await snapshot(st.inventory, st.capacity)
    nodes = [n for n in snap.nodes if nodeName is None or n.name == nodeName]
    if nodeName is not None and not nodes:
        raise NotFound(f"node {nodeName} not found", field="nodeName")
    items = gpu_detail(nodes, snap.usage, snap.gpus)
    return {"total": len(items), "controller": snap.controller, "items": items}


@router.get("/labels")
async def all_labels(request: Request) -> dict[str, list[str]]:
    await request.app.state.inventory.wait_synced()
    return labels_overview(request.app.state.inventory.node_rows())


@router.get("/nodes/labels")
async def nodes_with_label(
    request: Request, key: Annotated[str, Query(min_length=1, max_length=317)]
) -> dict[str, Any]:
    validate_key(key)
    await request.app.state.inventory.wait_synced()
    rows = sorted(request.app.state.inventory.node_rows(), key=lambda n: n.name)
    items = [{"nodeName": n.name, "value": n.labels[key]} for n in rows if key in n.labels]
    return {"key": key, "total": len(items), "items": items}


@router.get("/nodes/labels/all")
async def gpu_related_labels(request: Request) -> dict[str, Any]:
    await request.app.state.inventory.wait_synced()
    items = gpu_labels(request.app.state.inventory.node_rows())
    return {"total": len(items), "items": items}


@router.post("/nodes/labels/batch")
async def batch_labels(body: BatchLabels, request: Request) -> dict[str, Any]:
    st = request.app.state
    # A malformed or protected key fails the whole request: it would fail on every node.
    for key, value in body.labels.items():
        check_changeable(key, f"labels.{key}")
        validate_value(value, f"labels.{key}")
    success: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    mode = "overwrite" if body.overwrite else "add"
    for node in body.nodeNames:
        done: dict[str, str] = {}
        try:
            for key, value in body.labels.items():
                await set_label(st.cluster, st.inventory, node, key, value, mode=mode)
                done[key] = value
            success.append({"nodeName": node, "labels": done})
        except GpuplaneError as e:
            failed.append({"nodeName": node, "error": e.message, "status": e.http_status, "applied": done})
    return {"success": success, "failed": failed}


# ---- one node ------------------------------------------------------------------------------


@router.get("/nodes/{nodeName}")
async def get_node(nodeName: str, request: Request) -> dict[str, Any]:
    st = request.app.state
    row = await fresh_node(st.cluster, st.inventory, nodeName)
    snap = await snapshot(st.inventory, st.capacity)
    return node_detail(row, snap.usage.get(nodeName))


@router.post("/nodes/{nodeName}/pools", status_code=201)
async def join_pool(nodeName: str, body: JoinPool, request: Request) -> dict[str, Any]:
    st = request.app.state
    validate_pool_name(body.pool, "pool")
    await set_pool(st.cluster, st.inventory, nodeName, body.pool)
    return {"nodeName": nodeName, "pool": body.pool, "status": "joined"}


@router.delete("/nodes/{nodeName}/pools/{poolName}")
async def leave_pool(nodeName: str, poolName: str, request: Request) -> dict[str, Any]:
    st = request.app.state
    await set_pool(st.cluster, st.inventory, nodeName, None, expect_pool=poolName)
    return {"nodeName": nodeName, "pool": poolName, "status": "left"}


@router.get("/nodes/{nodeName}/labels")
async def node_labels(nodeName: str, request: Request) -> dict[str, Any]:
    st = request.app.state
    row = await fresh_node(st.cluster, st.inventory, nodeName)
    return {"nodeName": nodeName, "labels": dict(sorted(row.labels.items()))}


@router.post("/nodes/{nodeName}/labels", status_code=201)
async def add_label(nodeName: str, body: AddLabel, request: Request) -> dict[str, Any]:
    st = request.app.state
    mode = "overwrite" if body.overwrite else "add"
    await set_label(st.cluster, st.inventory, nodeName, body.key, body.value, mode=mode)
    return _label_doc(nodeName, body.key, body.value)


@router.get("/nodes/{nodeName}/labels/{key:path}")
async def get_label(nodeName: str, key: str, request: Request) -> dict[str, Any]:
    st = request.app.state
    validate_key(key)
    row = await fresh_node(st.cluster, st.inventory, nodeName)
    if key not in row.labels:
        raise NotFound(f"label {key} not found on node {nodeName}", field="key")
    return _label_doc(nodeName, key, row.labels[key])


@router.put("/nodes/{nodeName}/labels/{key:path}")
async def update_label(nodeName: str, key: str, body: UpdateLabel, request: Request) -> dict[str, Any]:
    st = request.app.state
    await set_label(st.cluster, st.inventory, nodeName, key, body.value, mode="update")
    return _label_doc(nodeName, key, body.value)


@router.delete("/nodes/{nodeName}/labels/{key:path}")
async def delete_label(nodeName: str, key: str, request: Request) -> dict[str, Any]:
    st = request.app.state
    if not key:
        raise InvalidSpec("key: label key must not be empty", field="key")
    await set_label(st.cluster, st.inventory, nodeName, key, None, mode="delete")
    return {"nodeName": nodeName, "key": key, "status": "deleted"}
