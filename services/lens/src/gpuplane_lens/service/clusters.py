"""Cluster registry use cases (register, list with probes, settings, delete, sessions, HF secret)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gpuplane_core.errors import Conflict, GpuplaneError, NotFound, Unprocessable
from gpuplane_lens.domain import validation as v
from gpuplane_lens.domain.records import (
    DEFAULT_INOTIFY_MAX_USER_INSTANCES,
    ClusterRecord,
    Gateway,
    HfSecretRef,
    SessionRecord,
    new_cluster_id,
)
from gpuplane_lens.domain.versions import StackProfile
from gpuplane_lens.k8s import cleanup, gateway, nodes, secrets
from gpuplane_lens.k8s.clients import TRANSPORT_ERRORS, ClusterClients, transport_error
from gpuplane_lens.k8s.node_cache import NodeCaches
from gpuplane_lens.k8s.overview import DiskCache
from gpuplane_lens.k8s.probe import Probe, probe
from gpuplane_lens.service.requests import Registration, SettingsUpdate
from gpuplane_lens.software.downloads import Downloads
from gpuplane_lens.store.db import IdTaken, Store

logger = logging.getLogger(__name__)

LLM_D_REPO = "llm-d"
LLM_D_BENCHMARK_REPO = "llm-d-benchmark"


class ClusterService:
    def __init__(
        self,
        store: Store,
        clients: ClusterClients,
        profile: StackProfile,
        downloads: Downloads,
        disk_cache: DiskCache,
        node_caches: NodeCaches,
        lens_hosts: list[str],
        probe_timeout: float,
        request_timeout: float,
    ) -> None:
        self.store = store
        self.clients = clients
        self.profile = profile
        self.downloads = downloads
        self.disk_cache = disk_cache
        self.node_caches = node_caches
        self.lens_hosts = lens_hosts
        self.probe_timeout = probe_timeout
        self.request_timeout = request_timeout

    # -- views ----------------------------------------------------------------------------------

    def view(self, rec: ClusterRecord, state: Probe | None) -> dict[str, Any]:
        """ClusterRecord JSON: never the kubeconfig nor the token, only coordinates."""
        return {
            "id": rec.id,
            "name": rec.name,
            "description": rec.description,
            "createdAt": _iso(rec.created_at),
            "updatedAt": _iso(rec.updated_at),
            "ready": bool(state and state.ready),
            "reason": None if state is None else state.reason,
            "proxy": {
                "mode": rec.proxy.mode,
                "httpProxy": rec.proxy.http_proxy,
                "httpsProxy": rec.proxy.https_proxy,
                "noProxy": rec.proxy.no_proxy,
            },
            "llmDRef": self.profile.llm_d,
            "llmDBenchmarkRef": self.profile.llm_d_benchmark,
            "llmDRepoPath": self.downloads.ready_path(LLM_D_REPO, self.profile.llm_d),
            "llmDBenchmarkRepoPath": self.downloads.ready_path(
                LLM_D_BENCHMARK_REPO, self.profile.llm_d_benchmark
            ),
            "hfTokenSecret": (
                {"namespace": rec.hf_token_secret.namespace, "name": rec.hf_token_secret.name}
                if rec.hf_token_secret
                else None
            ),
            "gatewayProvider": rec.gateway.provider,
            "gatewayNamespace": v.gateway_namespace(rec.gateway.namespace_prefix, rec.id),
            "gatewayPort": rec.gateway.port,
            "gatewayPublicUrl": rec.gateway.public_url,
            "gatewayAuthzHost": rec.gateway.authz_host,
            "inotifyMaxUserInstances": rec.inotify_max_user_instances,
            "draft": rec.draft,
        }

    async def probe(self, cluster_id: str) -> Probe:
        try:
            api = await self.clients.get(cluster_id)
        except NotFound:
            raise
        except Exception:  # a stored kubeconfig the client library cannot load
            logger.warning("cluster %s: kubeconfig could not be loaded", cluster_id)
            return Probe(False, "invalid_kubeconfig")
        return await probe(api, self.profile.min_k8s_version, self.probe_timeout)

    async def probe_all(self, records: list[ClusterRecord]) -> list[Probe]:
        """All clusters at once: the slowest probe bounds the list, not their sum."""
        return list(await asyncio.gather(*(self.probe(r.id) for r in records)))

    # -- use cases ------------------------------------------------------------------------------

    async def list(self, include_drafts: bool) -> list[dict[str, Any]]:
        records = await self.store.list_clusters(include_drafts)
        probes = await self.probe_all(records)
        return [self.view(r, p) for r, p in zip(records, probes, strict=True)]

    def _authz_host(self, provider: str | None, host: str | None) -> str | None:
        if host is None and provider in v.PROVIDERS_WITH_LENS_HOOK and self.lens_hosts:
            return self.lens_hosts[0]
        return host

    async def port_check(self, cluster_id: str, port: int, timeout: float | None = None) -> dict[str, Any]:
        """Whether ``port`` can expose this cluster's gateway (a free NodePort, or already its own)."""
        rec = await self.store.get_cluster(cluster_id)
        if not v.NODE_PORT_MIN <= port <= v.NODE_PORT_MAX:
            return {"available": False, "owner": None, "reason": "outside the NodePort range 30000-32767"}
        api = await self.clients.get(rec.id)
        owner = await gateway.node_port_owner(api, port, timeout or self.request_timeout)
        own_ns = v.gateway_namespace(rec.gateway.namespace_prefix, rec.id)
        if owner is None or owner.split("/", 1)[0] == own_ns:
            return {"available": True, "owner": owner}
        return {"available": False, "owner": owner, "reason": f"NodePort {port} is used by {owner}"}

    async def _ensure_port_free(self, rec: ClusterRecord) -> None:
        """422 `gateway_port_in_use` when another Service holds the port; unknowable (unreachable) passes."""
        if rec.gateway.port is None:
            return
        try:
            check = await self.port_check(rec.id, rec.gateway.port, self.probe_timeout)
        except GpuplaneError as err:
            if isinstance(err, NotFound) and err.code == "cluster_not_found":
                raise
            return
        if not check["available"]:
            raise Unprocessable(check["reason"], code="gateway_port_in_use", field="gatewayPort")

    async def _ensure_new_port_free(self, kubeconfig: str, port: int | None) -> None:
        """`_ensure_port_free` for a cluster not stored yet (a fresh id owns no Service)."""
        if port is None:
            return
        try:
            api = await self.clients.build(kubeconfig)
        except Exception:  # a kubeconfig the client library cannot load: the probe reports it
            return
        try:
            owner = await gateway.node_port_owner(api, port, self.probe_timeout)
        except (GpuplaneError, *TRANSPORT_ERRORS):
            return  # unknowable (unreachable) passes
        finally:
            await api.close()
        if owner is not None:
            raise Unprocessable(
                f"NodePort {port} is used by {owner}", code="gateway_port_in_use", field="gatewayPort"
            )

    async def register(self, reg: Registration) -> tuple[dict[str, Any], str]:
        name = v.check_name(reg.name)
        description = v.check_description(reg.description)
        v.parse_kubeconfig(reg.kubeconfig)  # validated; the original text is stored (encrypted)
        proxy = v.parse_proxy(reg.proxy) if reg.proxy not in (None, "") else v.parse_proxy({})
        provider = v.check_gateway_provider(reg.gateway_provider)
        port = v.check_gateway_port(reg.gateway_port)
        public_url = v.check_host(reg.gateway_public_url, "gatewayPublicUrl")
        authz = v.check_host(reg.gateway_authz_host, "gatewayAuthzHost")
        inotify = v.check_inotify(reg.inotify_max_user_instances)
        now = datetime.now(UTC)
        rec = ClusterRecord(
            id=new_cluster_id(),
            name=name,
            description=description,
            draft=reg.draft,
            created_at=now,
            updated_at=now,
            proxy=proxy,
            gateway=Gateway(
                provider=provider,
                public_url=public_url,
                port=port,
                authz_host=self._authz_host(provider, authz),
            ),
            inotify_max_user_instances=inotify or DEFAULT_INOTIFY_MAX_USER_INSTANCES,
        )
        # Checked before anything is stored: a Lens killed mid-check leaves no half-registered record.
        await self._ensure_new_port_free(reg.kubeconfig.decode("utf-8"), port)
        for _ in range(5):  # 8 hex characters: a collision is rare, but then draw again
            try:
                rec = await self.store.create_cluster(rec, reg.kubeconfig.decode("utf-8"))
                break
            except IdTaken:
                rec = replace(rec, id=new_cluster_id())
        session = await self.store.session_for(rec.id)
        logger.info("registered cluster %s (draft=%s)", rec.id, rec.draft)
        state = await self.probe(rec.id)
        return self.view(rec, state), session.id

    async def update(self, cluster_id: str, update: SettingsUpdate) -> dict[str, Any]:
        rec = await self.store.get_cluster(cluster_id)
        f = update.fields
        changes: dict[str, Any] = {}
        gateway = rec.gateway
        if "name" in f:
            changes["name"] = v.check_name(f["name"])
        if "description" in f:
            changes["description"] = v.check_description(f["description"])
        if "proxy" in f and f["proxy"] is not None:
            changes["proxy"] = v.parse_proxy(f["proxy"])
        if "draft" in f and f["draft"] is not None:
            changes["draft"] = bool(f["draft"])
        if "inotifyMaxUserInstances" in f and f["inotifyMaxUserInstances"] is not None:
            changes["inotify_max_user_instances"] = v.check_inotify(f["inotifyMaxUserInstances"])
        if "gatewayProvider" in f:
            gateway = replace(gateway, provider=v.check_gateway_provider(f["gatewayProvider"]))
        if "gatewayNamespace" in f:
            gateway = replace(gateway, namespace_prefix=v.gateway_prefix(f["gatewayNamespace"], rec.id))
        if "gatewayPort" in f:
            gateway = replace(gateway, port=v.check_gateway_port(f["gatewayPort"]))
        if "gatewayPublicUrl" in f:
            gateway = replace(gateway, public_url=v.check_host(f["gatewayPublicUrl"], "gatewayPublicUrl"))
        if "gatewayAuthzHost" in f:
            gateway = replace(gateway, authz_host=v.check_host(f["gatewayAuthzHost"], "gatewayAuthzHost"))
        if "gatewayAuthzHost" in f or "gatewayProvider" in f:
            gateway = replace(gateway, authz_host=self._authz_host(gateway.provider, gateway.authz_host))
        candidate = replace(rec, gateway=gateway, **changes)
        if gateway.port is not None and gateway.port != rec.gateway.port:
            await self._ensure_port_free(candidate)
        new = await self.store.update_cluster(candidate)
        return self.view(new, await self.probe(new.id))

    async def session(self, cluster_id: str) -> tuple[dict[str, Any], SessionRecord]:
        rec = await self.store.get_cluster(cluster_id)
        session = await self.store.session_for(rec.id)
        return self.view(rec, await self.probe(rec.id)), session

    async def active_session(self, session_id: str) -> SessionRecord:
        session = await self.store.get_session(session_id)
        if session is None or not session.active:
            raise NotFound(f"session {session_id!r} is not active", code="cluster_session_inactive")
        return session

    async def cluster_of_session(self, session_id: str) -> str:
        return (await self.active_session(session_id)).cluster_id

    async def disconnect(self, session_id: str) -> None:
        await self.active_session(session_id)
        await self.store.deactivate_session(session_id)

    async def delete(self, cluster_id: str) -> None:
        rec = await self.store.get_cluster(cluster_id)
        api = await self.clients.get(rec.id)
        t = self.request_timeout
        if not rec.draft:
            await cleanup.check_deletable(api, t)
        await cleanup.delete_gateway_namespace(
            api, v.gateway_namespace(rec.gateway.namespace_prefix, rec.id), t
        )
        if rec.hf_token_secret is not None:
            ref = rec.hf_token_secret
            await cleanup.delete_hf_secret(api, rec.id, ref.namespace, ref.name, rec.hf_namespace_created, t)
        if rec.draft:
            await cleanup.delete_draft_storage(api, t)
        await self.store.delete_cluster(rec.id)
        await self.node_caches.forget(rec.id)
        await self.clients.forget(rec.id)
        self.disk_cache.forget(rec.id)
        logger.info("deleted cluster %s", rec.id)

    async def model_secrets(self, cluster_id: str) -> dict[str, Any]:
        rec = await self.store.get_cluster(cluster_id)
        api = await self.clients.get(rec.id)
        try:
            items = await secrets.lens_secret_coordinates(api, self.request_timeout)
        except (TimeoutError, *TRANSPORT_ERRORS) as err:
            raise transport_error(err) from None
        return {"hostManagedAvailable": rec.hf_token_secret is not None, "items": items}

    async def set_schedulable(self, cluster_id: str, names: Any, unschedulable: bool) -> dict[str, Any]:
        rec = await self.store.get_cluster(cluster_id)
        checked = v.check_node_names(names)
        api = await self.clients.get(rec.id)
        items = await nodes.set_unschedulable(api, checked, unschedulable, self.request_timeout)
        return {"items": items}

    async def create_hf_secret(
        self, cluster_id: str, namespace: str | None, name: str | None, token: str | None
    ) -> dict[str, str]:
        rec = await self.store.get_cluster(cluster_id)
        ns, nm = v.check_secret_ref(namespace, name)
        value = v.check_token(token)
        api = await self.clients.get(rec.id)
        created_ns = await secrets.create_hf_secret(api, ns, nm, value, self.request_timeout)
        await self._record_secret(rec, ns, nm, created_ns)
        return {"namespace": ns, "name": nm}

    async def rotate_hf_secret(
        self, cluster_id: str, namespace: str | None, name: str | None, token: str | None
    ) -> dict[str, str]:
        rec = await self.store.get_cluster(cluster_id)
        recorded = rec.hf_token_secret
        value = v.check_token(token)
        ns, nm = v.check_secret_ref(
            namespace or (recorded.namespace if recorded else None),
            name or (recorded.name if recorded else None),
        )
        api = await self.clients.get(rec.id)
        created_ns = await secrets.apply_hf_secret(api, ns, nm, value, self.request_timeout)
        await self._record_secret(rec, ns, nm, created_ns)
        return {"namespace": ns, "name": nm}

    async def _record_secret(self, rec: ClusterRecord, ns: str, nm: str, created_ns: bool) -> None:
        # The Secret already exists remotely; a concurrent settings change must not lose its
        # coordinates, so re-read and retry on a version conflict.
        for _ in range(5):
            same_ns = rec.hf_token_secret is not None and rec.hf_token_secret.namespace == ns
            created = created_ns or (same_ns and rec.hf_namespace_created)
            try:
                await self.store.update_cluster(
                    replace(rec, hf_token_secret=HfSecretRef(ns, nm), hf_namespace_created=created)
                )
                return
            except Conflict as err:
                if err.code != "cluster_version_conflict":
                    raise
                rec = await self.store.get_cluster(rec.id)
        raise Conflict("the cluster record kept changing; retry", code="cluster_version_conflict")


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
