"""JSON views of the allocator (GET /api/allocation, simulate-schedule) shared by HTTP and gRPC."""

from __future__ import annotations

from typing import Any

from gpuplane_controller.domain.allocator import Decision
from gpuplane_controller.domain.model import Allocation, Amount
from gpuplane_controller.state import ClusterState, fmt_tflops, fmt_vram


def amount_json(a: Amount) -> dict[str, str]:
    out = {"tflops": fmt_tflops(a.tflops_m), "vram": fmt_vram(a.vram)}
    if a.percent_m:
        out["computePercent"] = fmt_tflops(a.percent_m)
    return out


def allocation_json(a: Allocation) -> dict[str, Any]:
    r = a.req
    return {
        "poolName": r.pool,
        "workloadName": r.workload,
        "request": amount_json(r.request),
        "limit": amount_json(r.limit),
        "count": r.gpu_count,
        "gpuModel": r.gpu_model,
        "vendor": r.vendor,
        "gpuNames": list(a.gpus),
        "nodeName": a.node,
        "podMeta": {"name": r.pod.name, "namespace": r.pod.namespace, "uid": r.pod.uid},
        "qos": r.qos,
        "isolation": r.isolation,
    }


def allocation_state(state: ClusterState) -> dict[str, Any]:
    alloc = state.allocator
    gpu_store: dict[str, Any] = {}
    for name, g in sorted(alloc.gpus.items()):
        obj = state.gpu_objects.get(name) or {}
        status = dict(obj.get("status") or {})
        status["available"] = {"tflops": fmt_tflops(g.available_tflops_m), "vram": fmt_vram(g.available_vram)}
        gpu_store[name] = {
            "apiVersion": "tensor-fusion.ai/v1",
            "kind": "GPU",
            "metadata": {"name": name, "labels": obj.get("metadata", {}).get("labels") or {}},
            "status": status,
            "nodeName": g.node,
            "poolName": g.pool,
            "virtualCapacity": {"tflops": fmt_tflops(g.virtual_tflops_m), "vram": fmt_vram(g.capacity_vram)},
        }
    node_store = {
        node: {ref: True for ref in sorted(workers.values())}
        for node, workers in sorted(alloc.node_workers().items())
    }
    allocations = {uid: allocation_json(a) for uid, a in sorted(alloc.allocations.items())}
    gpu_map: dict[str, list[dict[str, Any]]] = {}
    for name in sorted(alloc.gpus):
        workers = alloc.gpu_workers(name)
        if workers:
            gpu_map[name] = [
                {
                    "request": amount_json(a.req.request),
                    "limit": amount_json(a.req.limit),
                    "podName": a.req.pod.name,
                    "podUID": a.req.pod.uid,
                    "namespace": a.req.pod.namespace,
                }
                for a in workers
            ]
    return {
        "gpuStore": gpu_store,
        "nodeWorkerStore": node_store,
        "allocation": allocations,
        "gpuToWorkerMap": gpu_map,
    }


def simulate_json(d: Decision) -> dict[str, Any]:
    stages = [{"FilterName": s.name, "Before": s.before, "After": s.after, "Diff": s.diff} for s in d.stages]
    feasible = len({n for n in d.diagnosis}) if not d.ok else 0
    result: dict[str, Any] = {
        "scheduleResult": {
            "suggestedHost": d.node,
            "gpuNames": d.gpus,
            "score": d.score,
            "gpuScores": d.gpu_scores,
            "evaluatedNodes": d.num_nodes,
            "feasibleNodes": (d.num_nodes - feasible) if d.ok else 0,
            "pool": d.pool,
        },
        "filterDetail": {"FilterStageDetails": stages},
        "error": None,
    }
    if not d.ok:
        result["error"] = {
            "type": "FitError",
            "message": d.error,
            "failedFilter": d.failed_filter,
            "numAllNodes": d.num_nodes,
            "diagnosis": {
                "nodeToStatus": {
                    "nodes": {
                        node: {
                            "code": "Unschedulable",
                            "plugin": nd.plugin,
                            "reasons": nd.reasons,
                            "message": f"{nd.plugin}: {'; '.join(nd.reasons)}",
                        }
                        for node, nd in sorted(d.diagnosis.items())
                    }
                }
            },
        }
    return result
