"""The node scaler (`-enable-auto-expander`): GPUNodeClaims for unschedulable GPU pods.

Every `expander_interval_seconds` the leader:
1. lists the GPUNodeClaims it manages; a claim whose node (`spec.nodeName`, or a node labelled
   `tensor-fusion.ai/node-claim=<claim>`) is Ready and has reported GPUs is marked
   `status.phase: Bound` and forgotten;
   one not Ready after `expander_claim_timeout_seconds` is marked `Failed` and stops counting;
   the rest are in flight;
2. takes the pending `tensor-fusion-scheduler` pods the scheduler marked PodScheduled=False
   (reason Unschedulable) that still do not fit the current GPUs, in pools whose
   `nodeManagerConfig.provisioningMode` is `Provisioned` or `Karpenter`;
3. packs them into the in-flight claims' GPUs, and creates new claims, each a copy of an existing
   node of the pool, only for what is left (`domain/expander.py`), within the pool's
   `capacityConfig.maxResources` and `expander_max_inflight_claims`.
A node provisioner (cloud, Karpenter, or a person) turns each claim into a node; its GPUs join
the pool through the hypervisor and the scheduler's retry then places the pods.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_controller.domain.expander import (
    Demand,
    GpuShape,
    InFlightClaim,
    NodeTemplate,
    PoolLimits,
    choose_templates,
    plan_expansion,
)
from gpuplane_controller.domain.podrequest import parse_request
from gpuplane_controller.k8s.events import record_event
from gpuplane_controller.k8s.sources import GROUP, VERSION
from gpuplane_controller.settings import Settings
from gpuplane_controller.state import ClusterState, fmt_tflops, fmt_vram
from gpuplane_core.errors import GpuplaneError
from gpuplane_core.k8s.raw import call_json
from gpuplane_core.quantity import to_bytes, to_milli

log = logging.getLogger(__name__)

PLURAL = "gpunodeclaims"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "gpuplane-controller"
POOL_LABEL = "tensor-fusion.ai/gpupool"
CLAIM_LABEL = "tensor-fusion.ai/node-claim"
EXPANDING_MODES = ("Provisioned", "Karpenter")
MERGE = "application/merge-patch+json"


class PendingSource(Protocol):
    def pending_pods(self) -> list[dict[str, Any]]: ...


def _unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _created(obj: dict[str, Any]) -> float:
    ts = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.strptime(str(ts), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return time.time()


def _opt(fn: Callable[[Any], int], value: Any) -> int | None:
    if value in (None, ""):
        return None
    try:
        return fn(value)
    except GpuplaneError:
        return None


class NodeExpander:
    def __init__(
        self,
        api: client.ApiClient,
        state: ClusterState,
        pending: PendingSource,
        settings: Settings,
        is_leader: Callable[[], bool],
    ) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.state = state
        self.pending = pending
        self.settings = settings
        self.is_leader = is_leader
        self._task: asyncio.Task[None] | None = None
        self._presched_since: dict[str, float] = {}
        self._reported_unfit: dict[str, str] = {}
        self._announced: dict[str, str] = {}  # pod key -> claim its Event named
        self._uids: dict[str, str] = {}
        self._info: dict[str, Any] = {
            "inFlightNodes": {},
            "inFlightNodeClaims": {},
            "preSchedulePods": {},
            "preScheduleTimerNum": 0,
        }

    def info(self) -> dict[str, Any]:
        return self._info

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.expander_interval_seconds)
            if not self.is_leader():
                continue
            try:
                await self.reconcile()
            except ApiException as e:
                log.warning("node expander pass failed: %s %s", e.status, e.reason)
            except Exception:  # keep expanding on the next pass
                log.exception("node expander pass failed")

    # ---- one pass ---------------------------------------------------------------------------------
    async def reconcile(self) -> None:
        now = time.time()
        claims = await self._list_claims()
        inflight: list[InFlightClaim] = []
        claim_info: dict[str, Any] = {}
        inflight_nodes: dict[str, Any] = {}
        for c in claims:
            name, spec = c["metadata"]["name"], c.get("spec") or {}
            phase = (c.get("status") or {}).get("phase") or "Pending"
            if phase != "Pending" or c["metadata"].get("deletionTimestamp"):
                continue
            node = self._node_for(name, spec.get("nodeName") or name)
            # Forgotten once the node is Ready *and* its GPUs are known: a Ready node whose
            # hypervisor has not reported yet still holds the pods, or they would claim again.
            if node is not None and node.ready and self.state.allocator.node_gpus(node.name):
                await self._set_phase(name, "Bound", f"node {node.name} is Ready with its GPUs")
                log.info("node claim %s: node %s is Ready; no longer in flight", name, node.name)
                continue
            if now - _created(c) > self.settings.expander_claim_timeout_seconds:
                await self._set_phase(name, "Failed", "no Ready node within the claim timeout")
                log.warning("node claim %s: no Ready node after %.0fs", name, now - _created(c))
                continue
            pool = (c["metadata"].get("labels") or {}).get(POOL_LABEL, "")
            gpus = self._claim_gpus(pool, spec)
            inflight.append(InFlightClaim(name, pool, gpus))
            planned = spec.get("nodeName") or name
            claim_info[name] = {
                "pool": pool,
                "nodeName": planned,
                "gpuDeviceOffered": len(gpus),
                "tflopsOffered": spec.get("tflopsOffered"),
                "vramOffered": spec.get("vramOffered"),
                "createdAt": c["metadata"].get("creationTimestamp"),
            }
            inflight_nodes[planned] = [
                {
                    "model": g.model,
                    "vendor": g.vendor,
                    "tflops": fmt_tflops(g.capacity_tflops_m),
                    "vram": fmt_vram(g.vram),
                }
                for g in gpus
            ]

        demands, requests = self._demands()
        pools = sorted({d.pool for d in demands})
        templates: dict[str, list[NodeTemplate]] = {}
        limits: dict[str, PoolLimits] = {}
        pool_uids: dict[str, str] = {}
        unfit: dict[str, str] = {}
        for pool in pools:
            obj = await self._get_pool(pool)
            mode = ((obj or {}).get("spec") or {}).get("nodeManagerConfig", {}).get("provisioningMode")
            if obj is None or mode not in EXPANDING_MODES:
                for d in demands:
                    if d.pool == pool:
                        unfit[d.key] = (
                            f"pool {pool} provisioningMode {mode or 'unset'} does not provision nodes"
                        )
                continue
            pool_uids[pool] = obj["metadata"]["uid"]
            templates[pool] = choose_templates(self._pool_nodes(pool))
            limits[pool] = self._limits(pool, obj)
        expandable = [d for d in demands if d.key not in unfit]
        plan = plan_expansion(expandable, templates, inflight, limits)
        unfit.update(plan.unfit)

        created: dict[str, str] = {}
        for i, nc in enumerate(plan.new_claims):
            name = await self._create_claim(nc.pool, pool_uids[nc.pool], nc.template, nc.pods)
            if name is None:
                continue
            created[f"new-{i}"] = name
            claim_info[name] = {
                "pool": nc.pool,
                "nodeName": name,
                "gpuDeviceOffered": len(nc.template.gpus),
                "tflopsOffered": fmt_tflops(nc.template.capacity_tflops_m),
                "vramOffered": fmt_vram(nc.template.vram),
                "createdAt": now(),
            }
            inflight_nodes[name] = [
                {
                    "model": g.model,
                    "vendor": g.vendor,
                    "tflops": fmt_tflops(g.capacity_tflops_m),
                    "vram": fmt_vram(g.vram),
                }
                for g in nc.template.gpus
            ]

        presched: dict[str, Any] = {}
        for key, target in plan.assigned.items():
            claim = created.get(target, target)
            if claim not in claim_info:
                continue  # its new claim could not be created; retried next pass
            presched[key] = {"claim": claim, **requests[key]}
        since = {k: self._presched_since.get(k, now) for k in presched}
        self._presched_since = since
        timeout = self.settings.expander_claim_timeout_seconds
        # One Event per pod and outcome, so `kubectl describe pod` tells why it waits.
        for key, entry in presched.items():
            if self._announced.get(key) != entry["claim"]:
                msg = (
                    f"waiting for node claim {entry['claim']} of pool {entry['pool']}; "
                    "scheduled once its node is Ready"
                )
                await self._pod_event(key, "Normal", "NodeExpansionCheck", msg)
        self._announced = {k: v["claim"] for k, v in presched.items()}
        for key, why in unfit.items():
            if self._reported_unfit.get(key) != why:
                log.info("pod %s: no node expansion: %s", key, why)
                await self._pod_event(key, "Warning", "NodeExpansionFailed", why)
        self._reported_unfit = dict(unfit)
        self._info = {
            "inFlightNodes": inflight_nodes,
            "inFlightNodeClaims": claim_info,
            "preSchedulePods": presched,
            "preScheduleTimerNum": sum(1 for t in since.values() if now - t < timeout),
        }

    # ---- inputs -----------------------------------------------------------------------------------
    def _demands(self) -> tuple[list[Demand], dict[str, dict[str, Any]]]:
        st = self.state
        demands: list[Demand] = []
        requests: dict[str, dict[str, Any]] = {}
        self._uids = {}
        for pod in self.pending.pending_pods():
            if not _unschedulable(pod):
                continue
            try:
                req = parse_request(pod, st.default_pool)
            except GpuplaneError:
                continue  # an invalid request is the user's to fix; a node would not help
            if st.allocator.schedule(req, st.node_ok_for(pod.get("spec") or {})).ok:
                continue  # fits now (capacity freed up): the scheduler's retry places it
            key = f"{req.pod.namespace}/{req.pod.name}"
            self._uids[key] = req.pod.uid
            demands.append(
                Demand(
                    key=key,
                    pool=req.pool,
                    gpu_count=max(1, req.gpu_count),
                    tflops_m=req.request.tflops_m,
                    percent_m=req.request.percent_m,
                    vram=req.request.vram,
                    model=req.gpu_model,
                    vendor=req.vendor,
                    whole_gpu=req.dedicated_gpu or req.isolation == "shared",
                )
            )
            requests[key] = {
                "pool": req.pool,
                "gpuCount": max(1, req.gpu_count),
                "tflops": fmt_tflops(req.request.tflops_m) if req.request.tflops_m else "",
                "vram": fmt_vram(req.request.vram) if req.request.vram else "",
            }
        return demands, requests

    def _pool_nodes(self, pool: str) -> dict[str, list[GpuShape]]:
        nodes: dict[str, list[GpuShape]] = {}
        for g in self.state.allocator.pool_gpus(pool):
            nodes.setdefault(g.node, []).append(
                GpuShape(g.model, g.vendor, g.capacity_tflops_m, g.virtual_tflops_m, g.capacity_vram)
            )
        return nodes

    def _limits(self, pool: str, obj: dict[str, Any]) -> PoolLimits:
        mx = ((obj.get("spec") or {}).get("capacityConfig") or {}).get("maxResources") or {}
        gpus = self.state.allocator.pool_gpus(pool)
        return PoolLimits(
            max_inflight_claims=self.settings.expander_max_inflight_claims,
            current_tflops_m=sum(g.capacity_tflops_m for g in gpus),
            current_vram=sum(g.capacity_vram for g in gpus),
            max_tflops_m=_opt(to_milli, mx.get("tflops")),
            max_vram=_opt(to_bytes, mx.get("vram")),
        )

    def _claim_gpus(self, pool: str, spec: dict[str, Any]) -> tuple[GpuShape, ...]:
        n = int(spec.get("gpuDeviceOffered") or 0)
        if n <= 0:
            return ()
        extra = spec.get("extraParams") or {}
        t = (_opt(to_milli, spec.get("tflopsOffered")) or 0) // n
        v = (_opt(to_bytes, spec.get("vramOffered")) or 0) // n
        p = self.state.pools.get(pool)
        oversell = p.oversell if p is not None else 100
        shape = GpuShape(extra.get("gpuModel", ""), extra.get("gpuVendor", ""), t, t * oversell // 100, v)
        return (shape,) * n

    def _node_for(self, claim: str, node_name: str) -> Any:
        nodes = self.state.nodes
        if node_name in nodes:
            return nodes[node_name]
        return next((n for n in nodes.values() if n.labels.get(CLAIM_LABEL) == claim), None)

    # ---- Kubernetes -------------------------------------------------------------------------------
    async def _list_claims(self) -> list[dict[str, Any]]:
        listed = await call_json(
            self.custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            label_selector=f"{MANAGED_BY}={MANAGER}",
        )
        return list(listed.get("items") or [])

    async def _get_pool(self, pool: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = await self.custom.get_cluster_custom_object(
                GROUP, VERSION, "gpupools", pool
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return obj

    async def _pod_event(self, key: str, kind: str, reason: str, message: str) -> None:
        ns, name = key.split("/", 1)
        involved = {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": name,
            "namespace": ns,
            "uid": self._uids.get(key),
        }
        try:
            await record_event(
                self.core, involved, reason, message, component="tf-controller-node-expander", type_=kind
            )
        except ApiException as e:
            log.debug("event on pod %s not recorded: %s", key, e.status)

    async def _set_phase(self, name: str, phase: str, message: str) -> None:
        try:
            await self.custom.patch_cluster_custom_object_status(
                GROUP,
                VERSION,
                PLURAL,
                name,
                {"status": {"phase": phase, "message": message}},
                _content_type=MERGE,
            )
        except ApiException as e:
            if e.status != 404:
                raise

    async def _create_claim(self, pool: str, pool_uid: str, tpl: NodeTemplate, pods: list[str]) -> str | None:
        name = f"{pool[:40]}-{secrets.token_hex(4)}"
        first = tpl.gpus[0]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GPUNodeClaim",
            "metadata": {
                "name": name,
                "labels": {MANAGED_BY: MANAGER, POOL_LABEL: pool},
                "annotations": {"tensor-fusion.ai/pending-pods": ",".join(sorted(pods))[:4096]},
                "ownerReferences": [
                    {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUPool", "name": pool, "uid": pool_uid}
                ],
            },
            "spec": {
                "nodeName": name,
                "tflopsOffered": fmt_tflops(tpl.capacity_tflops_m),
                "vramOffered": fmt_vram(tpl.vram),
                "gpuDeviceOffered": len(tpl.gpus),
                "extraParams": {
                    "gpuModel": first.model,
                    "gpuVendor": first.vendor,
                    "templateNode": tpl.template_node,
                    "tflopsPerGPU": format(Decimal(first.capacity_tflops_m) / 1000, "f"),
                },
            },
        }
        try:
            await self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
        except ApiException as e:
            log.warning("creating node claim for pool %s failed: %s %s", pool, e.status, e.reason)
            return None
        await self._set_phase(name, "Pending", f"waiting for a node for {len(pods)} pending pod(s)")
        log.info(
            "node claim %s created for pool %s (copy of %s) for pods %s", name, pool, tpl.template_node, pods
        )
        return name
