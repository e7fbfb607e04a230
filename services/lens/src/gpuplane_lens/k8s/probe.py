"""Reachability and version of a managed cluster (`ready` + `reason`, kubernetes-version)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from gpuplane_core.errors import GpuplaneError
from gpuplane_lens.domain.versions import short_version, supported
from gpuplane_lens.k8s.clients import request_json


@dataclass(frozen=True)
class Probe:
    ready: bool
    reason: str | None
    """unreachable | unauthorized | not_ready | version_unsupported | invalid_kubeconfig, or None."""
    version: str | None = None
    git_version: str | None = None


def _reason(err: GpuplaneError) -> str:
    if err.code in ("cluster_unauthorized", "forbidden"):
        return "unauthorized"
    if err.code in ("cluster_unreachable", "kubectl_timeout"):
        return "unreachable"
    return "not_ready"


async def version(api: client.ApiClient, timeout: float) -> tuple[str | None, str | None]:
    info: Any = await request_json(api, "GET", "/version", timeout=timeout)
    if not isinstance(info, dict):
        return None, None
    git = str(info.get("gitVersion", ""))
    return short_version(str(info.get("major", "")), str(info.get("minor", "")), git), git or None


async def probe(api: client.ApiClient, min_version: str, timeout: float) -> Probe:
    """`/readyz` and `/version` within ``timeout`` seconds in total."""
    try:
        async with asyncio.timeout(timeout):
            answer = await request_json(api, "GET", "/readyz", timeout=timeout)
            short, git = await version(api, timeout)
    except TimeoutError:
        return Probe(False, "unreachable")
    except GpuplaneError as err:
        return Probe(False, _reason(err))
    if not (isinstance(answer, str) and answer.strip() == "ok"):
        return Probe(False, "not_ready", short, git)
    if git is None or not supported(git, min_version):
        return Probe(False, "version_unsupported", short, git)
    return Probe(True, None, short, git)
