"""The cluster's HF_TOKEN Secret. The token travels only in request bodies, never in logs."""

from __future__ import annotations

import base64
import json

from kubernetes_asyncio import client

from gpuplane_core.errors import Conflict, UpstreamError
from gpuplane_lens.domain.cleanup import MANAGED_BY_LABEL
from gpuplane_lens.k8s.clients import request_json

FIELD_MANAGER = "llm-d-lens"
HF_TOKEN_KEY = "HF_TOKEN"


async def ensure_namespace(api: client.ApiClient, namespace: str, timeout: float) -> bool:
    """Create ``namespace`` (labelled as Lens's) when missing; True when Lens created it."""
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "labels": {MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1]}},
    }
    try:
        await request_json(api, "POST", "/api/v1/namespaces", body=body, timeout=timeout)
    except Conflict:
        return False
    return True


def _secret(namespace: str, name: str, token: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1]},
        },
        "data": {HF_TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


async def create_hf_secret(
    api: client.ApiClient, namespace: str, name: str, token: str, timeout: float
) -> bool:
    """Create the Secret (409 `secret_already_exists` if present); True if the namespace was created."""
    created_ns = await ensure_namespace(api, namespace, timeout)
    try:
        await request_json(
            api,
            "POST",
            f"/api/v1/namespaces/{namespace}/secrets",
            body=_secret(namespace, name, token),
            timeout=timeout,
        )
    except Conflict:
        raise Conflict(
            f"secret {namespace}/{name} already exists; rotate it with PUT .../hf-token-secret",
            code="secret_already_exists",
        ) from None
    return created_ns


async def apply_hf_secret(
    api: client.ApiClient, namespace: str, name: str, token: str, timeout: float
) -> bool:
    """Server-side apply (create or overwrite). Returns whether the namespace was created."""
    created_ns = await ensure_namespace(api, namespace, timeout)
    await request_json(
        api,
        "PATCH",
        f"/api/v1/namespaces/{namespace}/secrets/{name}",
        query={"fieldManager": FIELD_MANAGER, "force": "true"},
        body=_secret(namespace, name, token),
        content_type="application/apply-patch+yaml",
        timeout=timeout,
    )
    return created_ns


async def lens_secret_coordinates(api: client.ApiClient, timeout: float) -> list[dict[str, str]]:
    """Namespace, name and creation time of Lens's Secrets, read as metadata only so the
    values never even reach Lens."""
    resp = await api.call_api(
        "/api/v1/secrets",
        "GET",
        query_params=[("labelSelector", f"{MANAGED_BY_LABEL[0]}={MANAGED_BY_LABEL[1]}")],
        header_params={"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=timeout,
    )
    try:
        status, data = resp.status, await resp.read()
    finally:
        resp.release()
    if status != 200:
        raise UpstreamError(f"listing secrets answered HTTP {status}", code="cluster_request_failed")
    items = json.loads(data).get("items") or []
    return sorted(
        (
            {
                "namespace": i["metadata"]["namespace"],
                "name": i["metadata"]["name"],
                "createdAt": i["metadata"].get("creationTimestamp"),
            }
            for i in items
        ),
        key=lambda x: (x["namespace"], x["name"]),
    )
