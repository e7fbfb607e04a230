"""Cordon / uncordon: only the scheduling flag changes; nothing is evicted."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from gpuplane_core.errors import NotFound
from gpuplane_lens.domain.overview import node_ready
from gpuplane_lens.k8s.clients import request_json


async def set_unschedulable(
    api: client.ApiClient, names: list[str], unschedulable: bool, timeout: float
) -> list[dict[str, Any]]:
    # Every node must exist before any is changed, so a typo changes nothing.
    async def exists(name: str) -> None:
        try:
            await request_json(api, "GET", f"/api/v1/nodes/{name}", timeout=timeout)
        except NotFound:
            raise NotFound(f"node {name!r} not found", code="node_not_found", field="names") from None

    await asyncio.gather(*(exists(n) for n in names))

    async def patch(name: str) -> dict[str, Any]:
        node = await request_json(
            api,
            "PATCH",
            f"/api/v1/nodes/{name}",
            body={"spec": {"unschedulable": unschedulable}},
            content_type="application/merge-patch+json",
            timeout=timeout,
        )
        return {
            "name": name,
            "unschedulable": bool((node.get("spec") or {}).get("unschedulable", False)),
            "ready": node_ready(node),
        }

    return list(await asyncio.gather(*(patch(n) for n in names)))
