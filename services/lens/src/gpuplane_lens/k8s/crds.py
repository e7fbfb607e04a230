"""Gateway API / GIE CRD bundles: fetched from their (configurable) URLs and applied server-side."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio import client

from gpuplane_core.errors import GpuplaneError, NotFound
from gpuplane_lens.k8s.clients import request_json

FIELD_MANAGER = "llm-d-lens"
MAX_BUNDLE_BYTES = 16 * 1024 * 1024
# Which CRDs must exist for each bundle to count as installed.
REQUIRED_CRDS: dict[str, tuple[str, ...]] = {
    "gateway_api": ("gateways.gateway.networking.k8s.io", "httproutes.gateway.networking.k8s.io"),
    "gateway_api_inference_extension": ("inferencepools.inference.networking.k8s.io",),
}


async def fetch_bundle(session: aiohttp.ClientSession, url: str, timeout: float) -> list[dict[str, Any]]:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
        if resp.status != 200:
            raise ValueError(f"bundle download answered HTTP {resp.status}")
        raw = await resp.content.read(MAX_BUNDLE_BYTES + 1)
    if len(raw) > MAX_BUNDLE_BYTES:
        raise ValueError("bundle is larger than 16 MiB")
    docs = [d for d in yaml.safe_load_all(raw) if d]
    if not all(isinstance(d, dict) and d.get("apiVersion") and d.get("kind") for d in docs):
        raise ValueError("bundle holds a document that is not a Kubernetes object")
    return docs


async def _resource_path(api: client.ApiClient, doc: dict[str, Any], timeout: float) -> str:
    """The object's URL, from discovery of its group/version (so any kind in a bundle applies)."""
    api_version = str(doc["apiVersion"])
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    disc = await request_json(api, "GET", base, timeout=timeout)
    res = next(
        (r for r in disc.get("resources", []) if r.get("kind") == doc["kind"] and "/" not in r["name"]), None
    )
    if res is None:
        raise ValueError(f"{api_version} {doc['kind']} is not served by the cluster")
    name = doc["metadata"]["name"]
    if res.get("namespaced"):
        ns = doc["metadata"].get("namespace") or "default"
        return f"{base}/namespaces/{ns}/{res['name']}/{name}"
    return f"{base}/{res['name']}/{name}"


async def apply_docs(api: client.ApiClient, docs: list[dict[str, Any]], timeout: float) -> None:
    # CRDs first, so objects of the bundle's own kinds can be resolved afterwards.
    ordered = sorted(docs, key=lambda d: d["kind"] != "CustomResourceDefinition")
    for doc in ordered:
        path = await _resource_path(api, doc, timeout)
        await request_json(
            api,
            "PATCH",
            path,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            body=doc,
            content_type="application/apply-patch+yaml",
            timeout=timeout,
        )


async def crd_exists(api: client.ApiClient, name: str, timeout: float) -> bool:
    try:
        await request_json(
            api, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}", timeout=timeout
        )
    except NotFound:
        return False
    return True


async def bundle_ready(api: client.ApiClient, bundle: str, timeout: float) -> bool:
    found = await asyncio.gather(*(crd_exists(api, n, timeout) for n in REQUIRED_CRDS[bundle]))
    return all(found)


async def install_bundle(
    api: client.ApiClient, session: aiohttp.ClientSession, bundle: str, url: str, timeout: float
) -> dict[str, Any]:
    """{"ok", "message"}: ok only when the apply worked and the required CRDs exist afterwards."""
    try:
        docs = await fetch_bundle(session, url, timeout)
        await apply_docs(api, docs, timeout)
        if not await bundle_ready(api, bundle, timeout):
            return {
                "ok": False,
                "message": f"applied, but {', '.join(REQUIRED_CRDS[bundle])} not all present",
            }
    except GpuplaneError as err:
        return {"ok": False, "message": err.message}
    except (aiohttp.ClientError, TimeoutError, yaml.YAMLError, ValueError, KeyError) as err:
        return {"ok": False, "message": f"{type(err).__name__}: {err}"[:500]}
    return {"ok": True, "message": ""}
