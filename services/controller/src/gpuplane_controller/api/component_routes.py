"""Component endpoints, authenticated with a ServiceAccount token (TokenReview):
`GET /api/connection` for client libraries in workload pods, and the leader-only
`POST /api/assign-host-port` / `GET /api/assign-index` for the controller's own replicas.

A non-leader answers the two assign endpoints 503 `{"error": "current instance is not the
leader"}` rather than proxying: callers already retry 503, and a proxy would need every
replica to know and reach the leader's address."""

from __future__ import annotations

import re
from typing import Protocol

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse

from gpuplane_core.auth import Identity, require_identity
from gpuplane_core.errors import InvalidSpec, Unauthorized

router = APIRouter()

# A pod name: a DNS-1123 subdomain; at most 247 characters so that `port.<name>` is still a valid
# ConfigMap key in the assignment ledger.
_POD_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class _Connections(Protocol):
    async def connection_url(self, namespace: str, name: str, caller: Identity, timeout: float) -> str: ...


class _Assignments(Protocol):
    async def assign(self, kind: str, pod: str) -> int: ...


@router.get("/api/connection", response_class=PlainTextResponse)
async def get_connection(
    request: Request,
    name: str = Query(min_length=1, max_length=253),
    namespace: str = Query(min_length=1, max_length=63),
    caller: Identity = Depends(require_identity),
) -> PlainTextResponse:
    hub: _Connections = request.app.state.connections
    timeout = float(request.app.state.settings.connection_wait_timeout_s)
    return PlainTextResponse(await hub.connection_url(namespace, name, caller, timeout))


def _check_caller(request: Request, caller: Identity, pod: str) -> None:
    want = request.app.state.settings.component_service_account
    if caller.username != want:
        # 401 like /api/connection's "not the owner": the token proves an identity that may not ask.
        raise Unauthorized("only the controller's own ServiceAccount may ask for assignments")
    if len(pod) > 247 or not _POD_NAME.match(pod):
        raise InvalidSpec(
            "podName must be a pod name (a lower-case DNS-1123 subdomain of at most 247 characters)",
            field="podName",
        )


async def _assign(request: Request, caller: Identity, pod: str, kind: str) -> PlainTextResponse:
    _check_caller(request, caller, pod)
    assignments: _Assignments = request.app.state.assignments
    return PlainTextResponse(str(await assignments.assign(kind, pod)))


@router.post("/api/assign-host-port", response_class=PlainTextResponse)
async def assign_host_port(
    request: Request,
    pod: str = Query(alias="podName", min_length=1),
    caller: Identity = Depends(require_identity),
) -> PlainTextResponse:
    return await _assign(request, caller, pod, "port")


@router.get("/api/assign-index", response_class=PlainTextResponse)
async def assign_index(
    request: Request,
    pod: str = Query(alias="podName", min_length=1),
    caller: Identity = Depends(require_identity),
) -> PlainTextResponse:
    return await _assign(request, caller, pod, "index")
