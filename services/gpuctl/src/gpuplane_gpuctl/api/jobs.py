"""/api/v1/jobs: HTTP <-> the job operations (no Kubernetes or domain logic here)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from gpuplane_core.errors import GpuplaneError, InvalidSpec
from gpuplane_gpuctl.admission import create_job
from gpuplane_gpuctl.domain.spec import KINDS
from gpuplane_gpuctl.domain.yaml_load import YamlLimits
from gpuplane_gpuctl.queries import job_detail, list_page

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])

MAX_TAIL = 10_000
DRAIN_QUIET_S = 1.0


class CreateJobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    yamlContent: str


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    yamlContents: list[str]


def _limits(request: Request) -> YamlLimits:
    return YamlLimits(max_bytes=request.app.state.settings.max_yaml_bytes)


async def _create(request: Request, text: str) -> dict[str, Any]:
    st = request.app.state
    admitted = await create_job(text, st.jobs, st.capacity, _limits(request), st.cluster)
    spec = admitted.spec
    created = admitted.workload.get("metadata", {}).get("creationTimestamp")
    msg = f"job submitted to {'pool ' + spec.resources.pool if spec.resources.pool else 'the cluster'}"
    if admitted.placement:
        msg += f"; controller: {admitted.placement}"
    return {
        "jobId": spec.job.name,
        "name": spec.job.name,
        "namespace": spec.job.namespace,
        "kind": spec.kind,
        "status": "pending",
        "createdAt": created or datetime.now(UTC).isoformat(),
        "message": msg,
    }


@router.post("", status_code=201)
async def create(body: CreateJobRequest, request: Request) -> dict[str, Any]:
    return await _create(request, body.yamlContent)


@router.post("/batch", status_code=201)
async def create_batch(body: BatchRequest, request: Request) -> dict[str, Any]:
    limit = request.app.state.settings.max_batch_items
    if len(body.yamlContents) > limit:
        raise InvalidSpec(f"yamlContents: at most {limit} documents per batch", field="yamlContents")
    success: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for i, text in enumerate(body.yamlContents):
        try:
            r = await _create(request, text)
            success.append({"index": i, "jobId": r["jobId"], "name": r["name"], "namespace": r["namespace"]})
        except GpuplaneError as e:
            failed.append({"index": i, "error": e.message, "status": e.http_status})
    return {"success": success, "failed": failed}


@router.get("", response_model=None)
async def list_jobs(
    request: Request,
    kind: Annotated[str | None, Query(description="training | inference | notebook | compute")] = None,
    pool: str | None = None,
    status: str | None = None,
    namespace: str | None = None,
    page: Annotated[int, Query(ge=1)] = 1,
    pageSize: Annotated[int, Query(ge=1, le=100)] = 20,
) -> JSONResponse:
    if kind is not None and kind not in KINDS:
        raise InvalidSpec(f"kind: must be one of {', '.join(KINDS)}", field="kind")
    cache = request.app.state.pod_cache
    await cache.wait_synced()
    # JSONResponse directly: the page is plain JSON already, FastAPI's encoder pass would only cost time.
    return JSONResponse(
        list_page(
            cache.rows(),
            kind=kind,
            pool=pool,
            status=status,
            namespace=namespace,
            page=page,
            page_size=pageSize,
        )
    )


@router.get("/{jobId}")
async def get_job(jobId: str, request: Request, namespace: str | None = None) -> dict[str, Any]:
    repo = request.app.state.jobs
    job = await repo.find(jobId, namespace)
    return await job_detail(repo, job, jobId)


@router.delete("/{jobId}")
async def delete_job(
    jobId: str, request: Request, namespace: str | None = None, force: bool = False
) -> dict[str, Any]:
    repo = request.app.state.jobs
    job = await repo.find(jobId, namespace)
    await repo.delete(job, force)
    return {
        "jobId": job.name,
        "namespace": job.namespace,
        "status": "terminating",
        "message": "job deletion submitted" + (" (forced, grace period 0)" if force else ""),
    }


@router.get("/{jobId}/logs")
async def get_logs(
    jobId: str,
    request: Request,
    namespace: str | None = None,
    tail: Annotated[int, Query(ge=1, le=MAX_TAIL)] = 100,
    pod: str | None = None,
) -> dict[str, Any]:
    repo = request.app.state.jobs
    job = await repo.find(jobId, namespace)
    p = repo.pick_pod(job, pod)
    lines, last = await repo.read_logs(job.namespace, p["metadata"]["name"], tail)
    return {"logs": lines, "pod": p["metadata"]["name"], "lastTimestamp": last}


class _LogParams(BaseModel):
    model_config = ConfigDict(extra="ignore")
    namespace: str | None = None
    pod: str | None = None
    tail: Annotated[int, Field(ge=1, le=MAX_TAIL)] | None = None


@router.websocket("/{jobId}/logs/ws")
async def logs_ws(websocket: WebSocket, jobId: str) -> None:
    """Follows the pod's log stream: each line is sent once, in order, as {"type": "log", "data": ...}.

    Ends with {"type": "end"} and close code 1000 when the stream ends (the pod
    finished or went away); an error is sent as {"type": "error", "data": ...}
    followed by close code 4000 + its HTTP status (4404, 4400, ...).
    """
    await websocket.accept()
    repo = websocket.app.state.jobs
    try:
        params = _LogParams.model_validate(dict(websocket.query_params))
        job = await repo.find(jobId, params.namespace)
        pod = repo.pick_pod(job, params.pod)
        stream = repo.follow_logs(job.namespace, pod["metadata"]["name"], params.tail)
    except GpuplaneError as e:
        await websocket.send_json({"type": "error", "data": e.message})
        await websocket.close(code=4000 + e.http_status)
        return
    except ValueError as e:
        await websocket.send_json({"type": "error", "data": str(e).splitlines()[0]})
        await websocket.close(code=4400)
        return

    line_seen = asyncio.Event()

    async def pump() -> None:
        async for line in stream:
            line_seen.set()
            await websocket.send_json({"type": "log", "data": line})

    async def client_gone() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                await websocket.receive_text()  # clients send nothing; this notices a close

    async def pod_done() -> None:
        await repo.wait_pod_done(job.namespace, pod["metadata"]["name"])
        # Let the stream deliver what it still has: end after a quiet second.
        line_seen.clear()
        with contextlib.suppress(TimeoutError):
            while True:
                await asyncio.wait_for(line_seen.wait(), DRAIN_QUIET_S)
                line_seen.clear()

    sender = asyncio.create_task(pump())
    watcher = asyncio.create_task(client_gone())
    ender = asyncio.create_task(pod_done())
    done, _ = await asyncio.wait({sender, watcher, ender}, return_when=asyncio.FIRST_COMPLETED)
    for t in (sender, watcher, ender):
        t.cancel()
    await asyncio.gather(sender, watcher, ender, return_exceptions=True)
    client_left = watcher in done and sender not in done
    if client_left:
        return  # nothing to say to a closed socket; cancelling the pump closed the log stream
    err = None if sender.cancelled() else sender.exception()
    if err is None and ender in done and not ender.cancelled():
        err = ender.exception()
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        if err is None:
            await websocket.send_json({"type": "end"})
            await websocket.close(code=1000)
        else:
            status = err.http_status if isinstance(err, GpuplaneError) else 502
            msg = err.message if isinstance(err, GpuplaneError) else "log stream failed"
            if not isinstance(err, GpuplaneError):
                log.warning("log stream of %s failed", jobId, exc_info=err)
            await websocket.send_json({"type": "error", "data": msg})
            await websocket.close(code=4000 + status)
