"""TensorFusionConnection status from the workload's worker pods (pure; dicts in camelCase).

Worker pods of a TensorFusionWorkload are the pods in the connection's namespace labelled
`tensor-fusion.ai/workload=<workloadName>` and `tensor-fusion.ai/component=worker` (the
labels TensorFusion's workload controller puts on its workers). A worker is usable once it
is Running, Ready, has a pod IP and a port: the `tensor-fusion.ai/port-number` annotation
(the host port the worker was given by `/api/assign-host-port`), else its first
containerPort. The URL has TensorFusion's form `native+<podIP>+<port>`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

WORKLOAD_LABEL = "tensor-fusion.ai/workload"
COMPONENT_LABEL = "tensor-fusion.ai/component"
WORKER = "worker"
PORT_ANNOTATION = "tensor-fusion.ai/port-number"

RUNNING, STARTING, PENDING = "Running", "Starting", "Pending"
STATUS_KEYS = ("phase", "connectionURL", "workerName")


def worker_of(pod: Mapping[str, Any]) -> str | None:
    """The workload a pod is a worker of, or None."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(COMPONENT_LABEL) != WORKER:
        return None
    name = labels.get(WORKLOAD_LABEL)
    return str(name) if name else None


def worker_port(pod: Mapping[str, Any]) -> int | None:
    raw = str(((pod.get("metadata") or {}).get("annotations") or {}).get(PORT_ANNOTATION) or "").strip()
    if raw.isdigit() and 0 < int(raw) <= 65535:
        return int(raw)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if isinstance(p.get("containerPort"), int):
                return int(p["containerPort"])
    return None


def worker_usable(pod: Mapping[str, Any]) -> bool:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Running" or not status.get("podIP"):
        return False
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return ready and worker_port(pod) is not None


def _live(pod: Mapping[str, Any]) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and (pod.get("status") or {}).get(
        "phase"
    ) not in ("Succeeded", "Failed")


def desired_status(
    conn: Mapping[str, Any], workers: Iterable[Mapping[str, Any]], load: Mapping[str, int]
) -> dict[str, str | None]:
    """The status the connection should have. It stays on its current worker while that one is
    usable; otherwise it goes to the usable worker with the fewest connections (then by name).
    `None` values mean "remove the field" (JSON merge patch)."""
    pods = list(workers)
    usable = {p["metadata"]["name"]: p for p in pods if worker_usable(p)}
    if usable:
        current = str((conn.get("status") or {}).get("workerName") or "")
        name = current if current in usable else min(usable, key=lambda n: (load.get(n, 0), n))
        pod = usable[name]
        url = f"native+{pod['status']['podIP']}+{worker_port(pod)}"
        return {"phase": RUNNING, "connectionURL": url, "workerName": name}
    phase = STARTING if any(_live(p) for p in pods) else PENDING
    return {"phase": phase, "connectionURL": None, "workerName": None}


def status_differs(conn: Mapping[str, Any], want: Mapping[str, str | None]) -> bool:
    have = conn.get("status") or {}
    return any((have.get(k) or None) != want.get(k) for k in STATUS_KEYS)


def running_url(conn: Mapping[str, Any]) -> str | None:
    """The URL a client gets: only once the connection is Running with a URL."""
    status = conn.get("status") or {}
    if status.get("phase") == RUNNING and status.get("connectionURL"):
        return str(status["connectionURL"])
    return None


def owner_uid(conn: Mapping[str, Any]) -> str | None:
    refs = (conn.get("metadata") or {}).get("ownerReferences") or []
    return str(refs[0].get("uid") or "") or None if refs else None
