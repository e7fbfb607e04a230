"""HTTP routes of the 集群 section: translate requests and responses, nothing else."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response
from starlette.datastructures import UploadFile

from gpuplane_core.errors import Unprocessable
from gpuplane_lens.api.ports import ClusterServicePort, OperationsPort
from gpuplane_lens.api.schemas import (
    IGNORED_VERSION_FIELDS,
    ClusterSettingsUpdate,
    HfTokenSecretCreate,
    HfTokenSecretUpdate,
    NodeNames,
    PrepullRequest,
)
from gpuplane_lens.service.hosts import lens_hosts
from gpuplane_lens.service.requests import Registration, SettingsUpdate

router = APIRouter()

MAX_KUBECONFIG_BYTES = 1024 * 1024
_FORM_FIELDS = {
    "name",
    "description",
    "file",
    "proxy",
    "gatewayProvider",
    "gatewayPublicUrl",
    "gatewayPort",
    "gatewayAuthzHost",
    "inotifyMaxUserInstances",
    "draft",
    *IGNORED_VERSION_FIELDS,
}


def _clusters(request: Request) -> ClusterServicePort:
    svc: ClusterServicePort = request.app.state.clusters
    return svc


def _ops(request: Request) -> OperationsPort:
    ops: OperationsPort = request.app.state.operations
    return ops


def _form_text(form: Any, key: str) -> str | None:
    value = form.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Unprocessable(f"{key} must be a text field", code="invalid_form_field", field=key)
    return value


def _form_int(form: Any, key: str, code: str) -> int | None:
    text = _form_text(form, key)
    if text is None or text.strip() == "":
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise Unprocessable(f"{key} must be an integer", code=code, field=key) from None


def _form_bool(form: Any, key: str) -> bool:
    text = (_form_text(form, key) or "false").strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", ""):
        return False
    raise Unprocessable(f"{key} must be a boolean", code="invalid_form_field", field=key)


@router.get("/api/cluster/clusters")
async def list_clusters(request: Request, includeDrafts: bool = False) -> dict[str, Any]:
    return {"items": await _clusters(request).list(includeDrafts)}


@router.post("/api/cluster/clusters", status_code=201)
async def register_cluster(request: Request) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        raise Unprocessable("the request must be multipart/form-data", code="invalid_form", field="file")
    async with request.form(max_files=1, max_fields=32) as form:
        unknown = sorted(set(form.keys()) - _FORM_FIELDS)
        if unknown:
            raise Unprocessable(
                f"unknown form fields: {', '.join(unknown)}", code="invalid_form_field", field=unknown[0]
            )
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise Unprocessable(
                "file (the kubeconfig upload) is required", code="invalid_kubeconfig", field="file"
            )
        data = await upload.read(MAX_KUBECONFIG_BYTES + 1)
        if len(data) > MAX_KUBECONFIG_BYTES:
            raise Unprocessable("kubeconfig exceeds 1 MiB", code="invalid_kubeconfig", field="file")
        reg = Registration(
            name=_form_text(form, "name"),
            description=_form_text(form, "description"),
            kubeconfig=data,
            proxy=_form_text(form, "proxy"),
            gateway_provider=_form_text(form, "gatewayProvider"),
            gateway_public_url=_form_text(form, "gatewayPublicUrl"),
            gateway_port=_form_int(form, "gatewayPort", "invalid_gateway_port"),
            gateway_authz_host=_form_text(form, "gatewayAuthzHost"),
            inotify_max_user_instances=_form_int(
                form, "inotifyMaxUserInstances", "invalid_inotify_max_user_instances"
            ),
            draft=_form_bool(form, "draft"),
        )
    cluster, session_id = await _clusters(request).register(reg)
    return {"cluster": cluster, "sessionId": session_id}


@router.patch("/api/cluster/clusters/{cluster_id}")
async def update_cluster(request: Request, cluster_id: str, body: ClusterSettingsUpdate) -> dict[str, Any]:
    fields = {k: getattr(body, k) for k in body.model_fields_set if k not in IGNORED_VERSION_FIELDS}
    cluster = await _clusters(request).update(cluster_id, SettingsUpdate(fields))
    return {"cluster": cluster, "sessionId": None}


@router.delete("/api/cluster/clusters/{cluster_id}", status_code=204)
async def delete_cluster(request: Request, cluster_id: str) -> Response:
    await _clusters(request).delete(cluster_id)
    return Response(status_code=204)


@router.get("/api/v1/versions")
async def versions(request: Request) -> dict[str, Any]:
    return dict(_clusters(request).profile.raw)


@router.get("/api/cluster/lens-hosts")
async def hosts(request: Request) -> dict[str, Any]:
    return {"items": lens_hosts(request.app.state.settings.lens_hosts)}


@router.post("/api/cluster/clusters/{cluster_id}/hf-token-secrets")
async def create_hf_secret(request: Request, cluster_id: str, body: HfTokenSecretCreate) -> dict[str, str]:
    return await _clusters(request).create_hf_secret(cluster_id, body.namespace, body.name, body.token)


@router.put("/api/cluster/clusters/{cluster_id}/hf-token-secret")
async def rotate_hf_secret(request: Request, cluster_id: str, body: HfTokenSecretUpdate) -> dict[str, str]:
    return await _clusters(request).rotate_hf_secret(cluster_id, body.namespace, body.name, body.token)


@router.post("/api/cluster/clusters/{cluster_id}/software-downloads", status_code=202)
async def start_downloads(request: Request, cluster_id: str) -> dict[str, Any]:
    # The body is optional and ignored: the pinned refs come from the stack profile.
    return await _ops(request).start_downloads(cluster_id)


@router.get("/api/cluster/clusters/{cluster_id}/software-downloads")
async def downloads(request: Request, cluster_id: str) -> dict[str, Any]:
    return await _ops(request).downloads(cluster_id)


@router.post("/api/cluster/clusters/{cluster_id}/images/prepull")
async def start_prepull(request: Request, cluster_id: str, body: PrepullRequest) -> dict[str, Any]:
    return await _ops(request).start_prepull(cluster_id, body.accelerators)


@router.get("/api/cluster/clusters/{cluster_id}/images/prepull")
async def prepull_status(request: Request, cluster_id: str) -> dict[str, Any]:
    return await _ops(request).prepull_status(cluster_id)


@router.post("/api/cluster/clusters/{cluster_id}/crds")
async def apply_crds(request: Request, cluster_id: str) -> dict[str, Any]:
    return await _ops(request).apply_crds(cluster_id)


@router.get("/api/cluster/clusters/{cluster_id}/crds")
async def crd_status(request: Request, cluster_id: str) -> dict[str, str]:
    return await _ops(request).crd_status(cluster_id)


@router.get("/api/cluster/clusters/{cluster_id}/kubernetes-version")
async def kubernetes_version(request: Request, cluster_id: str) -> dict[str, Any]:
    return await _ops(request).kubernetes_version(cluster_id)


@router.get("/api/cluster/session")
async def session(request: Request, clusterId: str = Query(...)) -> dict[str, Any]:
    cluster, sess = await _clusters(request).session(clusterId)
    return {"cluster": cluster, "sessionId": sess.id}


@router.get("/api/cluster/overview")
async def overview(request: Request, clusterId: str = Query(...)) -> dict[str, Any]:
    return await _ops(request).overview(clusterId)


@router.get("/api/cluster/sessions/{session_id}/planning-discovery/{resource}")
async def planning_discovery(request: Request, session_id: str, resource: str) -> dict[str, Any]:
    return await _ops(request).planning(session_id, resource)


@router.get("/api/cluster/clusters/{cluster_id}/gateway-port-check")
async def gateway_port_check(request: Request, cluster_id: str, port: str = Query(...)) -> dict[str, Any]:
    try:
        number = int(port)
    except ValueError:
        raise Unprocessable("port must be an integer", code="invalid_gateway_port", field="port") from None
    return await _clusters(request).port_check(cluster_id, number)


@router.get("/api/cluster-overview/sessions/{session_id}")
async def legacy_session(request: Request, session_id: str) -> dict[str, Any]:
    sess = await _clusters(request).active_session(session_id)
    return {
        "id": sess.id,
        "serverId": sess.cluster_id,
        "createdAt": sess.created_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "status": "connected",
    }


@router.post("/api/cluster-overview/sessions/{session_id}/disconnect", status_code=204)
async def legacy_disconnect(request: Request, session_id: str) -> Response:
    await _clusters(request).disconnect(session_id)
    return Response(status_code=204)


@router.post("/api/cluster/clusters/{cluster_id}/nodes/cordon")
async def cordon(request: Request, cluster_id: str, body: NodeNames) -> dict[str, Any]:
    return await _clusters(request).set_schedulable(cluster_id, body.names, True)


@router.post("/api/cluster/clusters/{cluster_id}/nodes/uncordon")
async def uncordon(request: Request, cluster_id: str, body: NodeNames) -> dict[str, Any]:
    return await _clusters(request).set_schedulable(cluster_id, body.names, False)


@router.get("/api/cluster/model-secrets")
async def model_secrets(request: Request, clusterId: str = Query(...)) -> dict[str, Any]:
    return await _clusters(request).model_secrets(clusterId)
