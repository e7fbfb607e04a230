"""HTTP routes of the 引导 (bootstrap) section: translate requests and responses, nothing else."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from gpuplane_lens.domain.bootstrap import Credentials, NodeRow, Role
from gpuplane_lens.domain.inventory import ProxySettings
from gpuplane_lens.service.bootstrap import Bootstrapper

router = APIRouter(prefix="/api/cluster/bootstrap")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class HostAddress(_Strict):
    host: str = Field(min_length=1, max_length=4096)
    port: int = Field(default=22, ge=1, le=65535)


class HostKeyRequest(_Strict):
    nodes: list[HostAddress] = Field(min_length=1, max_length=64)


class NodeInput(_Strict):
    host: str = Field(min_length=1, max_length=4096)
    port: int = Field(default=22, ge=1, le=65535)
    roles: list[Role] = Field(default_factory=lambda: list[Role](["worker"]), min_length=1)
    username: str = Field(
        default="root", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
    )
    privateKey: str | None = Field(default=None, max_length=16384)
    password: str | None = Field(default=None, max_length=1024)


class HostKeyPin(_Strict):
    host: str = Field(min_length=1, max_length=253)
    port: int = Field(default=22, ge=1, le=65535)
    fingerprint: str = Field(pattern=r"^SHA256:[A-Za-z0-9+/]{43}$")


class PreflightRequest(_Strict):
    nodes: list[NodeInput] = Field(min_length=1, max_length=64)
    hostKeys: list[HostKeyPin] = Field(min_length=1)


class ProxyInput(_Strict):
    mode: Literal["auto", "custom"] = "auto"
    httpProxy: str | None = Field(default=None, max_length=2048)
    httpsProxy: str | None = Field(default=None, max_length=2048)
    noProxy: str | None = Field(default=None, max_length=4096)


class CreateRequest(PreflightRequest):
    proxy: ProxyInput | None = None


def _boot(request: Request) -> Bootstrapper:
    boot: Bootstrapper = request.app.state.bootstrap
    return boot


def _rows(nodes: list[NodeInput]) -> list[NodeRow]:
    return [
        NodeRow(n.host, n.port, tuple(n.roles), n.username, Credentials(n.privateKey, n.password))
        for n in nodes
    ]


def _pins(pins: list[HostKeyPin]) -> list[tuple[str, int, str]]:
    return [(p.host, p.port, p.fingerprint) for p in pins]


@router.post("/host-keys")
async def host_keys(body: HostKeyRequest, request: Request) -> dict[str, Any]:
    keys = await _boot(request).host_keys([(n.host, n.port) for n in body.nodes])
    items: list[dict[str, Any]] = []
    for k in keys:
        item: dict[str, Any] = {"host": k.target.host, "port": k.target.port}
        if k.error is not None:
            item["error"] = k.error
        else:
            item.update(algorithm=k.algorithm, fingerprint=k.fingerprint)
        items.append(item)
    return {"items": items}


@router.post("/preflight")
async def preflight(body: PreflightRequest, request: Request) -> dict[str, Any]:
    results = await _boot(request).preflight(_rows(body.nodes), _pins(body.hostKeys))
    items = [
        {
            "host": r.node.target.host,
            "roles": list(r.node.roles),
            "state": r.state,
            "checks": [
                {
                    "id": c.id,
                    "label": c.label,
                    "status": c.status,
                    **({"detail": c.detail} if c.detail else {}),
                }
                for c in r.checks
            ],
        }
        for r in results
    ]
    return {"items": items, "allPassed": all(r.state == "passed" for r in results)}


@router.post("")
async def create(body: CreateRequest, request: Request) -> dict[str, str]:
    proxy = None
    # mode "auto" keeps the nodes' own proxy settings: nothing is rendered for it.
    if body.proxy is not None and body.proxy.mode == "custom":
        proxy = ProxySettings(body.proxy.httpProxy, body.proxy.httpsProxy, body.proxy.noProxy)
    job_id = await _boot(request).create(_rows(body.nodes), _pins(body.hostKeys), proxy)
    return {"bootstrapId": job_id}


@router.get("/{bootstrap_id}")
async def status(bootstrap_id: str, request: Request) -> dict[str, Any]:
    return await _boot(request).status(bootstrap_id)


@router.post("/{bootstrap_id}/cancel", status_code=204)
async def cancel(bootstrap_id: str, request: Request) -> Response:
    await _boot(request).cancel(bootstrap_id)
    return Response(status_code=204)
