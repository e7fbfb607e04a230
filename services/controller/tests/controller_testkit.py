"""Shared helpers of the controller's cluster tests: `tf-controller` as a subprocess,
GPU pools on fresh kwok nodes with GPU objects as a hypervisor would report them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client

from devcluster.services import ServiceProcess
from gpuplane.controller.v1 import types_pb2

GROUP, VERSION = "tensor-fusion.ai", "v1"
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def ControllerProc(kubeconfig: str) -> ServiceProcess:
    """`tf-controller` started the way other services' tests start it."""
    return ServiceProcess.controller(kubeconfig)


class GpuPool:
    """A fresh pool on fresh kwok nodes, with GPU objects as a hypervisor would report them."""

    def __init__(self, api: Any, name: str, nodes: list[str]) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.name = name
        self.nodes = nodes
        self.gpus: dict[str, list[str]] = {}

    async def create(
        self,
        gpus_per_node: int = 2,
        strategy: str | None = None,
        tflops: str = "100",
        vram: str = "80Gi",
        oversell: int | None = None,
    ) -> None:
        spec: dict[str, Any] = {
            "nodeManagerConfig": {
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "test-pool", "operator": "In", "values": [self.name]}]}
                    ]
                }
            }
        }
        if oversell:
            spec["capacityConfig"] = {"oversubscription": {"tflopsOversellRatio": oversell}}
        if strategy:
            await self.custom.create_cluster_custom_object(
                GROUP,
                VERSION,
                "schedulingconfigtemplates",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "SchedulingConfigTemplate",
                    "metadata": {"name": self.name},
                    "spec": {"placement": {"mode": strategy}},
                },
            )
            spec["schedulingConfigTemplate"] = self.name
        await self.custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "gpupools",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "GPUPool",
                "metadata": {"name": self.name},
                "spec": spec,
            },
        )
        for node in self.nodes:
            for i in range(gpus_per_node):
                name = f"{node}-gpu-{i}"
                self.gpus.setdefault(node, []).append(name)
                await self.custom.create_cluster_custom_object(
                    GROUP,
                    VERSION,
                    "gpus",
                    {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPU", "metadata": {"name": name}},
                )
                await self.custom.patch_cluster_custom_object_status(
                    GROUP,
                    VERSION,
                    "gpus",
                    name,
                    {
                        "status": {
                            "phase": "Running",
                            "vendor": "NVIDIA",
                            "model": "H100",
                            "uuid": name,
                            "index": i,
                            "capacity": {"tflops": tflops, "vram": vram},
                            "available": {"tflops": tflops, "vram": vram},
                            "nodeSelector": {"kubernetes.io/hostname": node},
                        }
                    },
                    _content_type="application/merge-patch+json",
                )

    async def delete(self) -> None:
        for names in self.gpus.values():
            for n in names:
                await self.custom.delete_cluster_custom_object(GROUP, VERSION, "gpus", n)
        await self.custom.delete_cluster_custom_object(GROUP, VERSION, "gpupools", self.name)
        try:
            await self.custom.delete_cluster_custom_object(
                GROUP, VERSION, "schedulingconfigtemplates", self.name
            )
        except client.ApiException:
            pass


def pod_manifest(name: str, pool: str, **ann: str) -> dict[str, Any]:
    annotations = {"tensor-fusion.ai/gpupool": pool}
    annotations.update({f"tensor-fusion.ai/{k.replace('_', '-')}": v for k, v in ann.items()})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": annotations,
            "labels": {"tensor-fusion.ai/enabled": "true"},
            "namespace": "x",
        },
        "spec": {
            "schedulerName": "tensor-fusion-scheduler",
            "tolerations": [TOLERATION],
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


async def create_pod(api: Any, ns: str, name: str, pool: str, **ann: str) -> dict[str, Any]:
    body = pod_manifest(name, pool, **ann)
    body["metadata"]["namespace"] = ns
    await client.CoreV1Api(api).create_namespaced_pod(ns, body)
    return body


async def wait_bound(api: Any, ns: str, name: str, timeout: float = 20) -> client.V1Pod:
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = await core.read_namespaced_pod(name, ns)
        if p.spec.node_name:
            return p
        await asyncio.sleep(0.1)
    raise AssertionError(f"pod {ns}/{name} not bound in {timeout}s")


async def wait_unschedulable(api: Any, ns: str, name: str, timeout: float = 20) -> str:
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = await core.read_namespaced_pod(name, ns)
        assert not p.spec.node_name, f"{name} was bound to {p.spec.node_name}"
        for c in p.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False":
                return str(c.message)
        await asyncio.sleep(0.1)
    raise AssertionError(f"pod {ns}/{name} has no PodScheduled=False condition")


def gpus_of(p: client.V1Pod) -> list[str]:
    return p.metadata.annotations["tensor-fusion.ai/gpu-ids"].split(",")


async def eventually(fn: Callable[[], Awaitable[Any]], timeout: float = 30.0, what: str = "") -> Any:
    """Poll `fn` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = await fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout}s: {what}")
        await asyncio.sleep(0.2)


def device(node: str, i: int) -> types_pb2.Device:
    """A healthy H100 as a hypervisor reports it over gRPC."""
    return types_pb2.Device(
        uuid=f"GPU-{node}-{i}",
        vendor="NVIDIA",
        model="H100",
        index=i,
        numa_node=0,
        total_memory_bytes=80 * 2**30,
        max_tflops=989,
        healthy=True,
    )
