"""The platform contract the scheduler's one-call bind relies on: the apiserver's
pods/binding handler copies the Binding's metadata.annotations onto the pod in the
same write that sets spec.nodeName (so gpu-ids/index never lag the binding)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


async def test_binding_annotations_land_on_the_pod_with_the_node(kube_api: Any, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    pod = await core.create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bound", "annotations": {"keep": "me"}},
            "spec": {
                "schedulerName": "nobody-schedules-this",  # kube-scheduler leaves it to us
                "tolerations": [TOLERATION],
                "containers": [{"name": "main", "image": "busybox"}],
            },
        },
    )
    annotations = {"tensor-fusion.ai/gpu-ids": "gpu-node-0-gpu-3", "tensor-fusion.ai/index": "7"}
    await core.create_namespaced_binding(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "bound", "uid": pod.metadata.uid, "annotations": annotations},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-0"},
        },
        _preload_content=False,
    )
    got = await core.read_namespaced_pod("bound", namespace)
    assert got.spec.node_name == "gpu-node-0"
    assert got.metadata.annotations == {"keep": "me", **annotations}
