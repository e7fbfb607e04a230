"""Kubernetes adapter for gpuctl jobs: create, find, delete, events, logs.

Objects go in and come out as camelCase JSON dicts (the domain's language);
every ApiException is translated once through `k8s_errors`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_core.errors import Conflict, Forbidden, NotFound
from gpuplane_core.k8s.errors import k8s_errors, status_message
from gpuplane_gpuctl.domain.job import Job
from gpuplane_gpuctl.domain.manifests import (
    L_JOB,
    L_TYPE,
    Manifests,
    priority_class_objects,
)

GPUCTL_NS_LABEL = "runwhere.ai/namespace=true"
_SELECT_JOBS = L_TYPE  # every object gpuctl creates carries the job-type label


class JobRepo:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.sched = client.SchedulingV1Api(api)

    def to_dict(self, obj: Any) -> dict[str, Any]:
        out = self.api.sanitize_for_serialization(obj)
        return out if isinstance(out, dict) else {}

    # ---- setup ----------------------------------------------------------------------------
    async def ensure_priority_classes(self) -> None:
        for pc in priority_class_objects():
            try:
                await self.sched.create_priority_class(body=pc)
            except ApiException as e:
                if e.status != 409:
                    async with k8s_errors("PriorityClass"):
                        raise

    # ---- namespaces -----------------------------------------------------------------------
    async def require_namespace(self, ns: str) -> None:
        async with k8s_errors(f"namespace {ns}"):
            await self.core.read_namespace(ns)

    async def gpuctl_namespaces(self) -> list[str]:
        async with k8s_errors():
            lst = await self.core.list_namespace(label_selector=GPUCTL_NS_LABEL)
        return sorted({"default", *(n.metadata.name for n in lst.items)})

    # ---- create ---------------------------------------------------------------------------
    async def _workloads_named(self, ns: str | None, name: str) -> list[dict[str, Any]]:
        sel = f"{L_JOB}={name}"
        async with k8s_errors():
            if ns:
                got = await asyncio.gather(
                    self.batch.list_namespaced_job(ns, label_selector=sel),
                    self.apps.list_namespaced_deployment(ns, label_selector=sel),
                    self.apps.list_namespaced_stateful_set(ns, label_selector=sel),
                )
            else:
                got = await asyncio.gather(
                    self.batch.list_job_for_all_namespaces(label_selector=sel),
                    self.apps.list_deployment_for_all_namespaces(label_selector=sel),
                    self.apps.list_stateful_set_for_all_namespaces(label_selector=sel),
                )
        out = []
        for lst, kind in zip(got, ("Job", "Deployment", "StatefulSet"), strict=True):
            for item in lst.items:
                d = self.to_dict(item)
                d["kind"] = kind
                out.append(d)
        return out

    async def precheck(self, ns: str, name: str) -> None:
        """The namespace must exist (404) and no job of any kind may hold the name (409)."""

        async def namespace() -> bool:
            try:
                await self.core.read_namespace(ns)
            except ApiException as e:
                if e.status == 404:
                    return False
                async with k8s_errors():
                    raise
            return True

        exists, taken = await asyncio.gather(namespace(), self._workloads_named(ns, name))
        if not exists:
            raise NotFound(f"namespace {ns} not found", field="job.namespace")
        if taken:
            raise Conflict(f"job {name} already exists in namespace {ns}", field="job.name")

    async def create(self, m: Manifests) -> dict[str, Any]:
        """Create the objects; call `precheck` first (the apiserver still refuses a same-kind duplicate)."""
        meta = m.workload["metadata"]
        ns, name = meta["namespace"], meta["name"]
        try:
            if m.resource_type == "Job":
                created = await self.batch.create_namespaced_job(ns, body=m.workload)
            elif m.resource_type == "Deployment":
                created = await self.apps.create_namespaced_deployment(ns, body=m.workload)
            else:
                created = await self.apps.create_namespaced_stateful_set(ns, body=m.workload)
        except ApiException as e:
            if e.status == 409:
                raise Conflict(f"job {name} already exists in namespace {ns}", field="job.name") from e
            if e.status == 404:
                raise NotFound(f"namespace {ns} not found", field="job.namespace") from e
            if e.status == 403 and "exceeded quota" in status_message(e):
                raise Forbidden(status_message(e), field="resources", code="quota_exceeded") from e
            async with k8s_errors():
                raise
        if m.service is not None:
            svc = dict(m.service)
            # Owned by the workload, so the garbage collector also removes it if we never get to.
            svc["metadata"] = {
                **svc["metadata"],
                "ownerReferences": [
                    {
                        "apiVersion": m.workload["apiVersion"],
                        "kind": m.resource_type,
                        "name": name,
                        "uid": created.metadata.uid,
                        "controller": True,
                        "blockOwnerDeletion": False,
                    }
                ],
            }
            try:
                await self.core.create_namespaced_service(ns, body=svc)
            except ApiException as e:
                await self._delete_workload(ns, name, m.resource_type, grace=0)
                async with k8s_errors(f"service {name}"):
                    raise e from None
        return self.to_dict(created)

    # ---- find -----------------------------------------------------------------------------
    async def find(self, job_id: str, namespace: str | None) -> Job:
        """By job name, else by pod name; without a namespace, in gpuctl's namespaces first."""
        if namespace:
            await self.require_namespace(namespace)
        found = await self._workloads_named(namespace, job_id)
        if not found:
            pod = await self._pod_named(job_id, namespace)
            if pod is not None:
                labels = pod["metadata"].get("labels") or {}
                found = await self._workloads_named(pod["metadata"]["namespace"], labels.get(L_JOB, ""))
        if not found:
            where = f" in namespace {namespace}" if namespace else ""
            raise NotFound(f"job {job_id} not found{where}")
        if len(found) > 1:
            preferred = set(await self.gpuctl_namespaces())
            narrowed = [w for w in found if w["metadata"]["namespace"] in preferred] or found
            if len({w["metadata"]["namespace"] for w in narrowed}) > 1:
                spaces = ", ".join(sorted({w["metadata"]["namespace"] for w in narrowed}))
                raise Conflict(f"job {job_id} exists in several namespaces ({spaces}); pass namespace")
            found = narrowed
        w = found[0]
        meta = w["metadata"]
        job = Job(
            namespace=meta["namespace"],
            name=meta["name"],
            kind=(meta.get("labels") or {}).get(L_TYPE, ""),
            workload=w,
        )
        job.pods = await self.pods_of(job.namespace, job.name)
        return job

    async def _pod_named(self, name: str, namespace: str | None) -> dict[str, Any] | None:
        async with k8s_errors():
            if namespace:
                lst = await self.core.list_namespaced_pod(
                    namespace, field_selector=f"metadata.name={name}", label_selector=_SELECT_JOBS
                )
            else:
                lst = await self.core.list_pod_for_all_namespaces(
                    field_selector=f"metadata.name={name}", label_selector=_SELECT_JOBS
                )
        return self.to_dict(lst.items[0]) if lst.items else None

    async def pods_of(self, ns: str, name: str) -> list[dict[str, Any]]:
        async with k8s_errors():
            lst = await self.core.list_namespaced_pod(ns, label_selector=f"{L_JOB}={name}")
        pods = [self.to_dict(p) for p in lst.items]
        pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
        return pods

    async def service(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return self.to_dict(await self.core.read_namespaced_service(name, ns))
        except ApiException as e:
            if e.status == 404:
                return None
            async with k8s_errors():
                raise

    async def events(self, ns: str, names: set[str]) -> list[dict[str, Any]]:
        async with k8s_errors():
            lst = await self.core.list_namespaced_event(ns)
        return [
            self.to_dict(ev)
            for ev in lst.items
            if ev.involved_object is not None and ev.involved_object.name in names
        ]

    async def node_ip(self, node: str) -> str | None:
        try:
            n = await self.core.read_node(node)
        except ApiException:
            return None
        for addr in n.status.addresses or []:
            if addr.type == "InternalIP":
                return str(addr.address)
        return None

    # ---- delete ---------------------------------------------------------------------------
    async def _delete_workload(self, ns: str, name: str, resource_type: str, grace: int | None) -> None:
        body = client.V1DeleteOptions(propagation_policy="Background", grace_period_seconds=grace)
        try:
            if resource_type == "Job":
                await self.batch.delete_namespaced_job(name, ns, body=body)
            elif resource_type == "Deployment":
                await self.apps.delete_namespaced_deployment(name, ns, body=body)
            else:
                await self.apps.delete_namespaced_stateful_set(name, ns, body=body)
        except ApiException as e:
            if e.status != 404:
                async with k8s_errors(f"job {name}"):
                    raise

    async def delete(self, job: Job, force: bool) -> None:
        grace = 0 if force else None
        await self._delete_workload(job.namespace, job.name, job.resource_type, grace)
        try:
            await self.core.delete_namespaced_service(job.name, job.namespace)
        except ApiException as e:
            if e.status != 404:
                async with k8s_errors(f"service {job.name}"):
                    raise
        # Pods go with the workload (background cascade); force removes them right now.
        if force:
            async with k8s_errors():
                await self.core.delete_collection_namespaced_pod(
                    job.namespace, label_selector=f"{L_JOB}={job.name}", grace_period_seconds=0
                )

    # ---- logs -----------------------------------------------------------------------------
    def pick_pod(self, job: Job, pod: str | None) -> dict[str, Any]:
        if pod:
            for p in job.pods:
                if p["metadata"]["name"] == pod:
                    return p
            raise NotFound(f"pod {pod} is not part of job {job.name}", field="pod")
        if not job.pods:
            raise NotFound(f"job {job.name} has no pods yet")
        running = [p for p in job.pods if (p.get("status") or {}).get("phase") == "Running"]
        return (running or job.pods)[-1]

    async def read_logs(self, ns: str, pod: str, tail: int) -> tuple[list[str], str | None]:
        """The last `tail` lines and the timestamp of the last one (kubelet's RFC 3339 stamp)."""
        async with k8s_errors(f"logs of pod {pod}"):
            text = await self.core.read_namespaced_pod_log(
                pod, ns, container="main", tail_lines=tail, timestamps=True
            )
        lines, last = [], None
        for raw in str(text).splitlines():
            stamp, sep, line = raw.partition(" ")
            if sep and stamp[:1].isdigit() and "T" in stamp:
                last = stamp
                lines.append(line)
            else:
                lines.append(raw)
        return lines, last

    async def follow_logs(self, ns: str, pod: str, tail: int | None) -> AsyncIterator[str]:
        """The pod's log as a live stream (follow=true): each line once, until the stream ends."""
        async with k8s_errors(f"logs of pod {pod}"):
            resp = await self.core.read_namespaced_pod_log(
                pod, ns, container="main", follow=True, tail_lines=tail, _preload_content=False
            )
        try:
            async for raw in resp.content:
                yield raw.decode("utf-8", errors="replace").rstrip("\r\n")
        finally:
            resp.release()

    async def wait_pod_done(self, ns: str, pod: str) -> None:
        """Return once the pod has finished (Succeeded/Failed) or is gone.

        kubelet ends a followed log when the container exits, but not every
        log server does (kwok keeps following its file), so the WebSocket also
        watches the pod itself to know when to end the stream.
        """
        sel = f"metadata.name={pod}"
        while True:
            async with k8s_errors():
                lst = await self.core.list_namespaced_pod(ns, field_selector=sel)
            if not lst.items or lst.items[0].status.phase in ("Succeeded", "Failed"):
                return
            w = watch.Watch()
            async with w.stream(
                self.core.list_namespaced_pod,
                ns,
                field_selector=sel,
                resource_version=lst.metadata.resource_version,
                timeout_seconds=300,
            ) as events:
                async for ev in events:
                    obj = ev["object"]
                    if ev["type"] == "DELETED" or obj.status.phase in ("Succeeded", "Failed"):
                        return
