"""Image prepull: which images, the DaemonSet that pulls them, and its status per image and node."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuplane_lens.domain.errors import rule_error
from gpuplane_lens.domain.versions import StackProfile

DAEMONSET_PREFIX = "lens-image-prepull"
READY_MARKER = "/tmp/lens-prepulled"
FAILED_RESTARTS = 3
MANAGED_BY = {"app.kubernetes.io/managed-by": "llm-d-lens"}

# Model-server runtime image per accelerator id; the tag is the pinned llm-d version.
RUNTIME_IMAGES: dict[str, str] = {
    "nvidia": "ghcr.io/llm-d/llm-d-cuda",
    "intel": "ghcr.io/llm-d/llm-d-xpu",
    "amd": "ghcr.io/llm-d/llm-d-rocm",
}


def images_for(profile: StackProfile, accelerators: Sequence[str]) -> list[str]:
    unknown = [a for a in accelerators if a not in RUNTIME_IMAGES]
    if unknown:
        raise rule_error(
            f"unknown accelerators {unknown}; known: {sorted(RUNTIME_IMAGES)}",
            code="invalid_accelerator",
            field="accelerators",
        )
    images = [
        f"ghcr.io/llm-d/llm-d-router-endpoint-picker:{profile.router}",
        f"ghcr.io/llm-d/llm-d-router-disagg-sidecar:{profile.router}",
        f"ghcr.io/llm-d/llm-d-inference-payload-processor:{profile.payload_processor}",
    ]
    for acc in dict.fromkeys(accelerators):
        images.append(f"{RUNTIME_IMAGES[acc]}:{profile.llm_d}")
    return images


def container_name(index: int, image: str) -> str:
    repo = image.rsplit("/", 1)[-1].split(":", 1)[0]
    slug = re.sub(r"[^a-z0-9-]+", "-", repo.lower()).strip("-")[:50].strip("-")
    return f"p{index}-{slug}"


def daemonset(name: str, namespace: str, images: Sequence[str], helper_image: str) -> dict[str, Any]:
    """A privileged, hostPID DaemonSet tolerating every taint: one container per image runs the
    host's ``crictl pull`` inside the host namespaces, then idles with a readiness marker."""
    labels = {"app.kubernetes.io/name": DAEMONSET_PREFIX, "lens.llm-d.ai/prepull": name, **MANAGED_BY}
    containers = []
    for i, image in enumerate(images):
        script = (
            f"nsenter -t 1 -m -u -i -n -- crictl pull {image} && touch {READY_MARKER} && "
            "exec sleep 2147483647"
        )
        containers.append(
            {
                "name": container_name(i, image),
                "image": helper_image,
                "command": ["sh", "-c", script],
                "securityContext": {"privileged": True},
                "readinessProbe": {"exec": {"command": ["cat", READY_MARKER]}, "periodSeconds": 5},
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                "env": [{"name": "LENS_IMAGE", "value": image}],
            }
        )
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"lens.llm-d.ai/prepull": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "hostPID": True,
                    "tolerations": [{"operator": "Exists"}],
                    "priorityClassName": "system-node-critical",
                    "terminationGracePeriodSeconds": 1,
                    "containers": containers,
                },
            },
        },
    }


def images_of(ds: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(container name, image) pairs recorded in the DaemonSet's containers."""
    containers = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    out = []
    for c in containers:
        image = next((e.get("value") for e in c.get("env") or [] if e.get("name") == "LENS_IMAGE"), None)
        if image:
            out.append((str(c["name"]), str(image)))
    return out


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def status(ds: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Overall state, ready/desired nodes, per-image and per-node readiness."""
    if ds is None:
        return {"state": "idle", "desired": 0, "ready": 0, "images": [], "nodes": []}
    desired = int((ds.get("status") or {}).get("desiredNumberScheduled") or 0)
    pods = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
    images = images_of(ds)
    per_image = {name: {"ready": 0, "restarts": False} for name, _ in images}
    nodes = []
    for pod in sorted(pods, key=lambda p: str(p["spec"]["nodeName"])):
        statuses = {c.get("name"): c for c in (pod.get("status") or {}).get("containerStatuses") or []}
        restarts = 0
        for name, _ in images:
            cs = statuses.get(name) or {}
            restarts = max(restarts, int(cs.get("restartCount") or 0))
            if cs.get("ready"):
                per_image[name]["ready"] = int(per_image[name]["ready"]) + 1
            if int(cs.get("restartCount") or 0) >= FAILED_RESTARTS:
                per_image[name]["restarts"] = True
        nodes.append(
            {
                "node": pod["spec"]["nodeName"],
                "phase": (pod.get("status") or {}).get("phase", "Pending"),
                "ready": _pod_ready(pod),
                "restarts": restarts,
            }
        )
    image_items = []
    for name, image in images:
        ready = int(per_image[name]["ready"])
        state = (
            "failed"
            if per_image[name]["restarts"]
            else ("ready" if desired and ready >= desired else "pulling")
        )
        image_items.append({"name": image, "ready": ready, "desired": desired, "state": state})
    ready_nodes = sum(1 for n in nodes if n["ready"])
    if any(i["state"] == "failed" for i in image_items):
        overall = "failed"
    elif desired > 0 and all(i["state"] == "ready" for i in image_items):
        overall = "ready"
    else:
        overall = "pulling"
    return {"state": overall, "desired": desired, "ready": ready_nodes, "images": image_items, "nodes": nodes}
