"""One kubernetes_asyncio client per registered cluster, built from its stored kubeconfig.

Reads go through `request_json`, which returns plain dicts (no model deserialisation:
the overview of 1,000 nodes stays fast) and turns transport failures into the
domain errors Lens documents: 502 `cluster_unreachable`, 504 `kubectl_timeout`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_core.errors import GpuplaneError, Timeout, UpstreamError
from gpuplane_core.k8s.errors import status_message, translate_api_exception

logger = logging.getLogger(__name__)

KubeconfigSource = Callable[[str], Awaitable[str]]


class ClusterClients:
    """Cache of ApiClients by cluster id; created lazily, closed on delete and at shutdown."""

    def __init__(self, kubeconfig_of: KubeconfigSource, temp_dir: Path, pool_size: int = 32) -> None:
        self._kubeconfig_of = kubeconfig_of
        self._temp_dir = temp_dir
        self._pool_size = pool_size
        self._clients: dict[str, client.ApiClient] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, cluster_id: str) -> client.ApiClient:
        api = self._clients.get(cluster_id)
        if api is not None:
            return api
        lock = self._locks.setdefault(cluster_id, asyncio.Lock())
        async with lock:
            api = self._clients.get(cluster_id)
            if api is None:
                api = await self.build(await self._kubeconfig_of(cluster_id))
                self._clients[cluster_id] = api
        return api

    async def build(self, kubeconfig: str) -> client.ApiClient:
        # Certificate data is written to 0600 temp files (Python's ssl loads client certs only from
        # files); keep them in a private directory under the data dir, not in /tmp.
        self._temp_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self._temp_dir, 0o700)
        cfg = client.Configuration()
        await config.load_kube_config_from_dict(
            yaml.safe_load(kubeconfig), client_configuration=cfg, temp_file_path=str(self._temp_dir)
        )
        cfg.connection_pool_maxsize = self._pool_size
        return client.ApiClient(configuration=cfg)

    async def forget(self, cluster_id: str) -> None:
        api = self._clients.pop(cluster_id, None)
        if api is not None:
            await api.close()

    async def close(self) -> None:
        for cluster_id in list(self._clients):
            await self.forget(cluster_id)


TRANSPORT_ERRORS = (aiohttp.ClientError, ssl.SSLError, OSError)


def transport_error(exc: BaseException) -> GpuplaneError:
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return Timeout("the cluster's Kubernetes API did not answer in time", code="kubectl_timeout")
    return UpstreamError(
        f"the cluster's Kubernetes API is unreachable ({type(exc).__name__})", code="cluster_unreachable"
    )


async def request_json(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: dict[str, Any] | None = None,
    body: Any = None,
    content_type: str = "application/json",
    timeout: float = 15.0,
) -> Any:
    """One raw API call; the JSON answer as plain Python data. Raises domain errors only."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    try:
        async with asyncio.timeout(timeout):
            resp = await api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
            try:
                data = await resp.read()
                status = resp.status
            finally:
                resp.release()
    except (TimeoutError, *TRANSPORT_ERRORS) as exc:
        raise transport_error(exc) from None
    if not 200 <= status < 300:
        err = ApiException(status=status, reason=resp.reason)
        err.body = data.decode("utf-8", "replace")
        if status == 401:
            raise UpstreamError(
                f"the cluster rejected Lens's credentials: {status_message(err)}", code="cluster_unauthorized"
            )
        raise translate_api_exception(err)
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


async def list_items(api: client.ApiClient, path: str, timeout: float, **query: Any) -> list[dict[str, Any]]:
    """All items of a list call, following `continue` tokens."""
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 5000, **query}
    while True:
        page = await request_json(api, "GET", path, query=params, timeout=timeout)
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        params["continue"] = token
