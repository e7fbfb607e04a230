"""Pure views over Kubernetes objects (camelCase JSON dicts): list rows, statuses, ages."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuplane_gpuctl.domain.manifests import L_JOB, L_POOL, L_TYPE


def parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def iso(value: Any) -> str | None:
    t = parse_time(value)
    return t.isoformat() if t else None


def format_age(created: Any, now: datetime) -> str:
    """kubectl-style age: 45s, 12m, 3h, 5d."""
    t = parse_time(created)
    if t is None:
        return ""
    s = max(0, int((now - t).total_seconds()))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def pod_status(pod: dict[str, Any]) -> str:
    """What `kubectl get pods` shows in STATUS."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "Terminating"
    phase = status.get("phase") or "Pending"
    reason = phase
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if phase == "Succeeded":
        return "Completed"
    if phase == "Pending" and reason == "Pending":
        for cond in status.get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                return "Pending"
    return str(reason)


@dataclass(frozen=True)
class PodRow:
    """One row of GET /jobs; kept small so a cache of 10,000s of pods stays cheap."""

    namespace: str
    pod: str
    name: str
    kind: str
    pool: str | None
    status: str
    phase: str
    ready: str
    node: str | None
    ip: str | None
    created: datetime | None

    def item(self, now: datetime) -> dict[str, Any]:
        return {
            "jobId": self.pod,
            "name": self.name,
            "namespace": self.namespace,
            "kind": self.kind,
            "status": self.status,
            "ready": self.ready,
            "node": self.node,
            "ip": self.ip,
            "age": format_age(self.created, now),
        }

    def matches(self, kind: str | None, pool: str | None, status: str | None, namespace: str | None) -> bool:
        if kind and self.kind != kind:
            return False
        if pool and self.pool != pool:
            return False
        if namespace and self.namespace != namespace:
            return False
        return not status or status.lower() in (self.status.lower(), self.phase.lower())


def pod_row(pod: dict[str, Any]) -> PodRow:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    css = status.get("containerStatuses") or []
    total = len(spec.get("containers") or []) or len(css)
    ready = sum(1 for cs in css if cs.get("ready"))
    return PodRow(
        namespace=meta.get("namespace", ""),
        pod=meta.get("name", ""),
        name=labels.get(L_JOB) or labels.get("app") or "",
        kind=labels.get(L_TYPE, ""),
        pool=labels.get(L_POOL),
        status=pod_status(pod),
        phase=status.get("phase") or "Pending",
        ready=f"{ready}/{total}",
        node=spec.get("nodeName"),
        ip=status.get("podIP"),
        created=parse_time(meta.get("creationTimestamp")),
    )


def workload_status(workload: dict[str, Any], pods: list[dict[str, Any]]) -> str:
    """One word for the whole job: Pending, Running, Completed, Failed, Terminating."""
    meta = workload.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return "Terminating"
    st = workload.get("status") or {}
    if workload.get("kind") == "Job":
        for cond in st.get("conditions") or []:
            if cond.get("status") == "True" and cond.get("type") in ("Complete", "SuccessCriteriaMet"):
                return "Completed"
            if cond.get("status") == "True" and cond.get("type") in ("Failed", "FailureTarget"):
                return "Failed"
        if st.get("active"):
            return (
                "Running" if any(p.get("status", {}).get("phase") == "Running" for p in pods) else "Pending"
            )
        return "Pending"
    want = int((workload.get("spec") or {}).get("replicas", 1) or 0)
    ready = int(st.get("readyReplicas", 0) or 0)
    if want and ready >= want:
        return "Running"
    if any(p.get("status", {}).get("phase") == "Running" for p in pods):
        return "Running"
    return "Pending"


def started_at(workload: dict[str, Any], pods: list[dict[str, Any]]) -> str | None:
    st = workload.get("status") or {}
    if st.get("startTime"):
        return iso(st["startTime"])
    starts = [parse_time((p.get("status") or {}).get("startTime")) for p in pods]
    known = [s for s in starts if s]
    return min(known).isoformat() if known else None


def completed_at(workload: dict[str, Any]) -> str | None:
    return iso((workload.get("status") or {}).get("completionTime"))


def event_row(ev: dict[str, Any], now: datetime) -> dict[str, Any]:
    obj = ev.get("involvedObject") or {}
    source = ev.get("source") or {}
    when = (
        ev.get("lastTimestamp") or ev.get("eventTime") or (ev.get("metadata") or {}).get("creationTimestamp")
    )
    return {
        "age": format_age(when, now),
        "type": ev.get("type"),
        "reason": ev.get("reason"),
        "from": source.get("component") or ev.get("reportingComponent") or "",
        "object": f"{obj.get('kind')}/{obj.get('name')}",
        "message": ev.get("message"),
        "_t": iso(when) or "",
    }
