"""Server-side apply of rendered manifests through the raw REST API (no kubectl here).

Discovery maps each object's apiVersion/kind to its resource path, the way kubectl does,
so the API server itself validates every field (dryRun=All persists nothing).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

FIELD_MANAGER = "gpuplane-chart-test"


async def _json(resp: Any) -> dict[str, Any]:
    """Body of an un-preloaded response; a non-2xx answer raises ApiException like typed calls."""
    try:
        status, data = resp.status, await resp.read()
    finally:
        resp.release()
    if not 200 <= status <= 299:
        err = ApiException(status=status, reason=resp.reason)
        err.body = data.decode(errors="replace")
        raise err
    return dict(json.loads(data))


async def _get(api: ApiClient, path: str) -> dict[str, Any]:
    resp = await api.call_api(path, "GET", auth_settings=["BearerToken"], _preload_content=False)
    return await _json(resp)


class Discovery:
    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self._cache: dict[str, dict[str, tuple[str, bool]]] = {}

    async def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(base path of the resource, namespaced) for apiVersion/kind."""
        if api_version not in self._cache:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            doc = await _get(self.api, base)
            self._cache[api_version] = {
                r["kind"]: (f"{base}/{{ns}}{r['name']}", bool(r["namespaced"]))
                for r in doc["resources"]
                if "/" not in r["name"]
            }
        try:
            return self._cache[api_version][kind]
        except KeyError:
            raise LookupError(f"the API server has no {kind} in {api_version}") from None


class Applier:
    """Server-side apply with a discovery cache, as `kubectl apply --server-side` does."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.discovery = Discovery(api)

    async def apply(self, obj: dict[str, Any], namespace: str, *, dry_run: bool) -> dict[str, Any]:
        """Apply one object (a namespaced object goes to `namespace`); returns the server's answer."""
        path, namespaced = await self.discovery.resource(obj["apiVersion"], obj["kind"])
        obj = json.loads(json.dumps(obj))
        if namespaced:
            obj["metadata"]["namespace"] = namespace
            path = path.replace("{ns}", f"namespaces/{namespace}/")
        else:
            path = path.replace("{ns}", "")
        query: list[tuple[str, str]] = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        if dry_run:
            query.append(("dryRun", "All"))
        resp = await self.api.call_api(
            f"{path}/{obj['metadata']['name']}",
            "PATCH",
            query_params=query,
            header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
            body=obj,
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        return await _json(resp)
