"""Kubernetes API client factory: an explicit kubeconfig, $KUBECONFIG, in-cluster, or ~/.kube/config."""

from __future__ import annotations

import os

from kubernetes_asyncio import client, config


async def load_api_client(kubeconfig: str | None = None, *, pool_size: int = 32) -> client.ApiClient:
    """Create the long-lived client; call it in the app lifespan and close it there."""
    cfg = client.Configuration()
    # $KUBECONFIG is read now, not when kubernetes_asyncio was imported.
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if not path and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(config_file=path, client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration=cfg)
