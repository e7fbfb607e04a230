"""Kubernetes Events the controller records (scheduling failures, node expansion, rejected
dynamic config), and the RFC 3339 timestamps its status writes carry."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client

from gpuplane_core.k8s.raw import call_json

MAX_MESSAGE = 1024  # the apiserver refuses longer Event messages


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    """MicroTime, as Lease renewTime/acquireTime want it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def record_event(
    core: client.CoreV1Api,
    involved: dict[str, Any],
    reason: str,
    message: str,
    *,
    component: str,
    type_: str = "Warning",
) -> None:
    """One Event on `involved` (kind, apiVersion, name, namespace, uid...); raises ApiException."""
    ns, name = involved["namespace"], involved["name"]
    stamp = now()
    await call_json(
        core.create_namespaced_event,
        ns,
        {
            "metadata": {"generateName": f"{name}.", "namespace": ns},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "type": type_,
            "source": {"component": component},
            "reportingComponent": component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        },
    )
