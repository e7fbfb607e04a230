"""Who holds a NodePort on a managed cluster (for the shared gateway's exposed port)."""

from __future__ import annotations

from kubernetes_asyncio import client

from gpuplane_lens.k8s.clients import list_items


async def node_port_owner(api: client.ApiClient, port: int, timeout: float) -> str | None:
    """``namespace/name`` of the Service using ``port`` as a NodePort, else None."""
    for svc in await list_items(api, "/api/v1/services", timeout):
        for p in (svc.get("spec") or {}).get("ports") or []:
            if p.get("nodePort") == port:
                meta = svc["metadata"]
                return f"{meta['namespace']}/{meta['name']}"
    return None
