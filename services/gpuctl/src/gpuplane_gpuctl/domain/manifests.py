"""Job spec -> Kubernetes objects, and the reverse mapping used for `yaml_content`.

| kind      | objects                                          |
|-----------|--------------------------------------------------|
| training  | batch/v1 Job                                     |
| inference | apps/v1 Deployment + NodePort Service            |
| compute   | apps/v1 Deployment + NodePort Service            |
| notebook  | apps/v1 StatefulSet (1 replica) + NodePort Service |

Jobs that use a GPU (whole or fractional) tolerate the `nvidia.com/gpu` taint,
as the ExtendedResourceToleration admission plugin would add for whole GPUs:
GPU nodes are tainted so that only GPU jobs land there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuplane_gpuctl.domain.spec import JobSpec

L_TYPE = "runwhere.ai/job-type"
L_PRIORITY = "runwhere.ai/priority"
L_POOL = "runwhere.ai/pool"
L_NAMESPACE = "runwhere.ai/namespace"
L_JOB = "runwhere.ai/job-name"
L_GPU_TYPE = "runwhere.ai/gpu-type"
A_DESCRIPTION = "runwhere.ai/description"
A_MODEL = "runwhere.ai/model"
CONTAINER = "main"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT_KEY = "nvidia.com/gpu"

TF = "tensor-fusion.ai/"
TF_SCHEDULER = "tensor-fusion-scheduler"

PRIORITY_CLASSES: dict[str, dict[str, Any]] = {
    "high": {"value": 1_000_000, "preemptionPolicy": "PreemptLowerPriority"},
    "medium": {"value": 500_000, "preemptionPolicy": "PreemptLowerPriority"},
    "low": {"value": 100, "preemptionPolicy": "Never"},
}

RESOURCE_TYPES = {
    "training": "Job",
    "inference": "Deployment",
    "compute": "Deployment",
    "notebook": "StatefulSet",
}


def priority_class_name(priority: str) -> str:
    return f"gpuctl-{priority}"


def priority_class_objects() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {
                "name": priority_class_name(p),
                "labels": {"app.kubernetes.io/managed-by": "gpuctl"},
            },
            "value": c["value"],
            "preemptionPolicy": c["preemptionPolicy"],
            "globalDefault": False,
            "description": f"gpuctl {p} priority jobs",
        }
        for p, c in PRIORITY_CLASSES.items()
    ]


@dataclass(frozen=True)
class Manifests:
    workload: dict[str, Any]
    service: dict[str, Any] | None

    @property
    def resource_type(self) -> str:
        return str(self.workload["kind"])

    def pod(self) -> dict[str, Any]:
        """A Pod built from the template (what the controller's simulate expects)."""
        tpl = self.workload["spec"]["template"]
        meta = self.workload["metadata"]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-simulate",
                "namespace": meta["namespace"],
                **tpl["metadata"],
            },
            "spec": tpl["spec"],
        }


def job_labels(spec: JobSpec) -> dict[str, str]:
    labels = {
        L_TYPE: spec.kind,
        L_PRIORITY: spec.job.priority,
        L_NAMESPACE: spec.job.namespace,
        L_JOB: spec.job.name,
        "app": spec.job.name,
    }
    if spec.resources.pool:
        labels[L_POOL] = spec.resources.pool
    return labels


def _share_annotations(spec: JobSpec) -> dict[str, str]:
    share = spec.resources.gpuShare
    if share is None:
        return {}
    ann = {f"{TF}gpu-count": str(share.count)}
    if share.tflops is not None:
        ann[f"{TF}tflops-request"] = ann[f"{TF}tflops-limit"] = str(share.tflops)
    if share.percent is not None:
        ann[f"{TF}compute-percent-request"] = ann[f"{TF}compute-percent-limit"] = str(share.percent)
    if share.vram is not None:
        ann[f"{TF}vram-request"] = ann[f"{TF}vram-limit"] = share.vram
    if share.qos is not None:
        ann[f"{TF}qos"] = share.qos
    if spec.resources.pool:
        ann[f"{TF}gpupool"] = spec.resources.pool
    if spec.resources.gpuType:
        ann[f"{TF}gpu-model"] = spec.resources.gpuType
    return ann


def _container(spec: JobSpec) -> dict[str, Any]:
    env = spec.environment
    res: dict[str, str] = {"cpu": str(spec.resources.cpu), "memory": spec.resources.memory}
    if spec.resources.gpu > 0:
        res[GPU_RESOURCE] = str(spec.resources.gpu)
    c: dict[str, Any] = {
        "name": CONTAINER,
        "image": env.image,
        "resources": {"requests": dict(res), "limits": dict(res)},
    }
    if env.command:
        c["command"] = list(env.command)
    if env.args:
        c["args"] = list(env.args)
    if env.env:
        c["env"] = [{"name": e.name, "value": e.value} for e in env.env]
    port = spec.port
    if port is not None:
        c["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    if spec.storage.workdirs:
        c["volumeMounts"] = [
            {"name": f"workdir-{i}", "mountPath": w.path} for i, w in enumerate(spec.storage.workdirs)
        ]
    if spec.service and spec.service.healthCheck and port is not None:
        probe = {"httpGet": {"path": spec.service.healthCheck, "port": port}, "periodSeconds": 10}
        c["readinessProbe"] = {**probe, "initialDelaySeconds": 5}
        c["livenessProbe"] = {**probe, "initialDelaySeconds": 30, "failureThreshold": 3}
    return c


def _pod_template(spec: JobSpec) -> dict[str, Any]:
    labels = job_labels(spec)
    annotations: dict[str, str] = {}
    pod: dict[str, Any] = {
        "containers": [_container(spec)],
        "priorityClassName": priority_class_name(spec.job.priority),
    }
    if spec.kind == "training":
        pod["restartPolicy"] = "Never"
    if spec.environment.imagePullSecret:
        pod["imagePullSecrets"] = [{"name": spec.environment.imagePullSecret}]
    if spec.storage.workdirs:
        pod["volumes"] = [
            {"name": f"workdir-{i}", "hostPath": {"path": w.path, "type": "DirectoryOrCreate"}}
            for i, w in enumerate(spec.storage.workdirs)
        ]
    if spec.needs_gpu:
        pod["tolerations"] = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    if spec.resources.gpuShare is not None:
        # The controller picks GPUs (and the pool via the gpupool annotation) and binds the pod.
        labels[f"{TF}enabled"] = "true"
        annotations.update(_share_annotations(spec))
        pod["schedulerName"] = TF_SCHEDULER
    elif spec.resources.pool:
        pod["nodeSelector"] = {L_POOL: spec.resources.pool}
        if spec.resources.gpuType:
            pod["nodeSelector"][L_GPU_TYPE] = spec.resources.gpuType
    else:
        if spec.resources.gpuType:
            pod["nodeSelector"] = {L_GPU_TYPE: spec.resources.gpuType}
        # No pool: only nodes that belong to no pool.
        pod["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": L_POOL, "operator": "DoesNotExist"}]}]
                }
            }
        }
    meta: dict[str, Any] = {"labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": pod}


def to_manifests(spec: JobSpec) -> Manifests:
    name, ns = spec.job.name, spec.job.namespace
    labels = job_labels(spec)
    annotations: dict[str, str] = {}
    if spec.job.description:
        annotations[A_DESCRIPTION] = spec.job.description
    if spec.model is not None:
        annotations[A_MODEL] = json.dumps(spec.model.model_dump(exclude_none=True), sort_keys=True)
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    template = _pod_template(spec)
    selector = {"matchLabels": {L_JOB: name, L_TYPE: spec.kind}}
    workload: dict[str, Any]
    if spec.kind == "training":
        workload = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {"backoffLimit": 3, "ttlSecondsAfterFinished": 86400, "template": template},
        }
    elif spec.kind == "notebook":
        workload = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": meta,
            "spec": {"replicas": 1, "serviceName": name, "selector": selector, "template": template},
        }
    else:
        workload = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {"replicas": spec.replicas, "selector": selector, "template": template},
        }
    service = None
    port = spec.port
    if spec.kind != "training" and port is not None:
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
            "spec": {
                "type": "NodePort",
                "selector": {L_JOB: name, L_TYPE: spec.kind},
                "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
            },
        }
    return Manifests(workload=workload, service=service)


# ---- reverse mapping -------------------------------------------------------------------------


def _num(q: str) -> int | str:
    return int(q) if q.isdigit() else q


def to_yaml_content(workload: dict[str, Any]) -> dict[str, Any]:
    """Rebuild the gpuctl document from the controller object (camelCase JSON form)."""
    meta = workload.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    kind = labels.get(L_TYPE, "")
    tpl = (workload.get("spec") or {}).get("template") or {}
    pod = tpl.get("spec") or {}
    pod_ann = (tpl.get("metadata") or {}).get("annotations") or {}
    containers = pod.get("containers") or [{}]
    c = next((x for x in containers if x.get("name") == CONTAINER), containers[0])

    job: dict[str, Any] = {"name": meta.get("name"), "namespace": meta.get("namespace", "default")}
    if A_DESCRIPTION in annotations:
        job["description"] = annotations[A_DESCRIPTION]
    job["priority"] = labels.get(L_PRIORITY, "medium")

    env: dict[str, Any] = {"image": c.get("image", "")}
    secrets = pod.get("imagePullSecrets") or []
    if secrets:
        env["imagePullSecret"] = secrets[0].get("name")
    env["command"] = list(c.get("command") or [])
    env["args"] = list(c.get("args") or [])
    env["env"] = [{"name": e.get("name"), "value": e.get("value", "")} for e in c.get("env") or []]

    limits = (c.get("resources") or {}).get("limits") or {}
    res: dict[str, Any] = {}
    selector = pod.get("nodeSelector") or {}
    pool = labels.get(L_POOL)
    if pool:
        res["pool"] = pool
    gpu = int(limits.get(GPU_RESOURCE, 0) or 0)
    res["gpu"] = gpu
    gpu_type = selector.get(L_GPU_TYPE) or pod_ann.get(f"{TF}gpu-model")
    if gpu_type:
        res["gpuType"] = gpu_type
    share = _share_from(pod_ann)
    if share:
        res["gpuShare"] = share
    res["cpu"] = _num(str(limits.get("cpu", "")))
    res["memory"] = str(limits.get("memory", ""))

    doc: dict[str, Any] = {"kind": kind, "version": "v0.1", "job": job, "environment": env, "resources": res}
    mounts = c.get("volumeMounts") or []
    if mounts:
        doc["storage"] = {"workdirs": [{"path": m.get("mountPath")} for m in mounts]}
    if kind != "training":
        svc: dict[str, Any] = {"replicas": int((workload.get("spec") or {}).get("replicas", 1) or 1)}
        ports = c.get("ports") or []
        if ports:
            svc["port"] = int(ports[0].get("containerPort"))
        probe = c.get("readinessProbe") or {}
        path = (probe.get("httpGet") or {}).get("path")
        if path:
            svc["healthCheck"] = path
        doc["service"] = svc
    if A_MODEL in annotations:
        try:
            doc["model"] = json.loads(annotations[A_MODEL])
        except ValueError:
            pass
    return doc


def _share_from(ann: dict[str, str]) -> dict[str, Any] | None:
    if f"{TF}gpu-count" not in ann:
        return None
    share: dict[str, Any] = {}
    if f"{TF}tflops-request" in ann:
        share["tflops"] = ann[f"{TF}tflops-request"]
    if f"{TF}compute-percent-request" in ann:
        share["percent"] = int(ann[f"{TF}compute-percent-request"])
    if f"{TF}vram-request" in ann:
        share["vram"] = ann[f"{TF}vram-request"]
    share["count"] = int(ann[f"{TF}gpu-count"])
    if f"{TF}qos" in ann:
        share["qos"] = ann[f"{TF}qos"]
    return share
