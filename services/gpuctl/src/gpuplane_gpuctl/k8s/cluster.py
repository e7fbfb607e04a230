"""Kubernetes adapter for nodes, namespaces and ResourceQuotas (camelCase dicts in and out)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_core.errors import Conflict
from gpuplane_core.k8s.errors import k8s_errors
from gpuplane_gpuctl.domain.manifests import L_POOL
from gpuplane_gpuctl.domain.quota import L_NAMESPACE, L_QUOTA, QuotaState

MERGE = "application/merge-patch+json"
GPUCTL_NS_LABEL = f"{L_NAMESPACE}=true"
_RETRIES = 5


class ClusterRepo:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)

    def to_dict(self, obj: Any) -> dict[str, Any]:
        out = self.api.sanitize_for_serialization(obj)
        return out if isinstance(out, dict) else {}

    # ---- nodes ----------------------------------------------------------------------------
    async def read_node(self, name: str) -> dict[str, Any]:
        async with k8s_errors(f"node {name}"):
            return self.to_dict(await self.core.read_node(name))

    async def change_node(
        self,
        name: str,
        decide: Callable[[dict[str, Any]], tuple[dict[str, str | None], dict[str, str | None]]],
    ) -> dict[str, Any]:
        """Read the node, let `decide` check it (raising 404/409...) and return label and
        annotation changes (None removes), then patch them guarded by resourceVersion,
        re-deciding when someone else changed the node in between."""
        for _ in range(_RETRIES):
            node = await self.read_node(name)
            labels, annotations = decide(node)
            if not labels and not annotations:
                return node
            meta: dict[str, Any] = {"resourceVersion": node["metadata"]["resourceVersion"]}
            if labels:
                meta["labels"] = labels
            if annotations:
                meta["annotations"] = annotations
            try:
                patched = await self.core.patch_node(name, {"metadata": meta}, _content_type=MERGE)
            except ApiException as e:
                if e.status == 409:
                    continue
                async with k8s_errors(f"node {name}"):
                    raise
            return self.to_dict(patched)
        raise Conflict(f"node {name} kept changing while being updated; try again")

    async def workloads_in_pool(self, pool: str) -> list[str]:
        """gpuctl jobs that may still run in the pool: unfinished Jobs, Deployments, StatefulSets."""
        sel = f"{L_POOL}={pool}"
        async with k8s_errors():
            jobs, deps, sts = await asyncio.gather(
                self.batch.list_job_for_all_namespaces(label_selector=sel),
                self.apps.list_deployment_for_all_namespaces(label_selector=sel),
                self.apps.list_stateful_set_for_all_namespaces(label_selector=sel),
            )
        out = [f"{d.metadata.namespace}/{d.metadata.name}" for d in [*deps.items, *sts.items]]
        for j in jobs.items:
            conds = {c.type for c in (j.status.conditions or []) if c.status == "True"} if j.status else set()
            if not conds & {"Complete", "Failed"}:
                out.append(f"{j.metadata.namespace}/{j.metadata.name}")
        return sorted(out)

    # ---- namespaces -----------------------------------------------------------------------
    async def namespaces(self) -> list[dict[str, Any]]:
        """gpuctl's namespaces: labelled runwhere.ai/namespace=true, plus default."""
        async with k8s_errors():
            labelled, default = await asyncio.gather(
                self.core.list_namespace(label_selector=GPUCTL_NS_LABEL),
                self.core.read_namespace("default"),
            )
        found = {n.metadata.name: self.to_dict(n) for n in [*labelled.items, default]}
        return [found[k] for k in sorted(found)]

    async def read_namespace(self, name: str) -> dict[str, Any]:
        async with k8s_errors(f"namespace {name}"):
            return self.to_dict(await self.core.read_namespace(name))

    async def ensure_namespace(self, name: str) -> None:
        """Create the namespace with the gpuctl label, or add the label to an existing one."""
        body = {"metadata": {"name": name, "labels": {L_NAMESPACE: "true"}}}
        try:
            await self.core.create_namespace(body)
            return
        except ApiException as e:
            if e.status != 409:
                async with k8s_errors(f"namespace {name}"):
                    raise
        async with k8s_errors(f"namespace {name}"):
            await self.core.patch_namespace(name, {"metadata": {"labels": {L_NAMESPACE: "true"}}})

    async def delete_namespace(self, name: str) -> None:
        async with k8s_errors(f"namespace {name}"):
            await self.core.delete_namespace(name)

    # ---- quotas ---------------------------------------------------------------------------
    async def gpuctl_quotas(self, namespace: str | None = None) -> list[dict[str, Any]]:
        async with k8s_errors():
            if namespace:
                lst = await self.core.list_namespaced_resource_quota(namespace, label_selector=L_QUOTA)
            else:
                lst = await self.core.list_resource_quota_for_all_namespaces(label_selector=L_QUOTA)
        out = [self.to_dict(q) for q in lst.items]
        out.sort(key=lambda q: (q["metadata"]["namespace"], q["metadata"]["name"]))
        return out

    async def quota_states(self, namespace: str) -> list[QuotaState]:
        """Every ResourceQuota of the namespace (gpuctl's or not: all of them are enforced)."""
        async with k8s_errors():
            lst = await self.core.list_namespaced_resource_quota(namespace)
        return [
            QuotaState(
                name=q.metadata.name,
                hard=dict((q.spec.hard if q.spec else None) or {}),
                used=dict((q.status.used if q.status else None) or {}),
            )
            for q in lst.items
        ]

    async def create_quota(self, body: dict[str, Any]) -> dict[str, Any]:
        ns = body["metadata"]["namespace"]
        async with k8s_errors(f"namespace {ns}"):
            return self.to_dict(await self.core.create_namespaced_resource_quota(ns, body))

    async def delete_quota(self, namespace: str, name: str) -> None:
        try:
            await self.core.delete_namespaced_resource_quota(name, namespace)
        except ApiException as e:
            if e.status != 404:
                async with k8s_errors(f"quota {name}"):
                    raise

    async def namespace_exists(self, name: str) -> bool:
        try:
            await self.core.read_namespace(name)
        except ApiException as e:
            if e.status == 404:
                return False
            async with k8s_errors():
                raise
        return True
