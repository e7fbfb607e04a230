"""Planning discovery: a fixed allowlist of read-only calls, answered as plain JSON."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from gpuplane_core.errors import GpuplaneError
from gpuplane_lens.k8s.clients import request_json

PLANNING_READS: dict[str, str] = {
    "version": "/version",
    "nodes": "/api/v1/nodes",
    "deviceclasses": "/apis/resource.k8s.io/v1/deviceclasses",
    "resourceslices": "/apis/resource.k8s.io/v1/resourceslices",
    "runtimeclasses": "/apis/node.k8s.io/v1/runtimeclasses",
}


async def planning_read(api: client.ApiClient, resource: str, timeout: float) -> Any:
    """The JSON of the read, or None when it fails or is not a JSON object."""
    try:
        result = await request_json(api, "GET", PLANNING_READS[resource], timeout=timeout)
    except GpuplaneError:
        return None
    return result if isinstance(result, dict) else None
