"""Where the dynamic config comes from and how it is hot-reloaded: a YAML file polled for
changes (mtime and size), or a ConfigMap watched through the API server. A new config that
fails validation is rejected (logged, counted in `gpuplane_controller_dynamic_config_rejected_total`,
and for a ConfigMap a Warning Event on it) and the config in force stays."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter

from gpuplane_controller.domain.dynconfig import DynamicConfig, parse_config
from gpuplane_controller.k8s.events import record_event
from gpuplane_controller.settings import Settings
from gpuplane_core.errors import InvalidSpec
from gpuplane_core.k8s.raw import list_json
from gpuplane_core.k8s.watch import WatchEvent, WatchHealth, resumable_watch

log = logging.getLogger(__name__)

CONFIG_KEY = "config.yaml"


def _configmaps(api: client.ApiClient, namespace: str) -> Any:
    core = client.CoreV1Api(api)

    async def list_cm(**kw: Any) -> Any:
        return await list_json(core.list_namespaced_config_map)(namespace, **kw)

    return list_cm


def config_text(cm: dict[str, Any]) -> str | None:
    """The config document of a ConfigMap: key `config.yaml`, else its only key."""
    data = cm.get("data") or {}
    if CONFIG_KEY in data:
        return str(data[CONFIG_KEY])
    if len(data) == 1:
        return str(next(iter(data.values())))
    return None


class DynamicConfigSource:
    def __init__(self, settings: Settings, api: client.ApiClient, registry: CollectorRegistry) -> None:
        self.settings = settings
        self.api = api
        self.current = DynamicConfig()
        self.origin = "defaults"
        self.last_error: str | None = None
        self.health = WatchHealth()
        self._text: str | None = None
        self._task: asyncio.Task[None] | None = None
        self.listeners: list[Callable[[DynamicConfig], None]] = []  # called with each new config
        self.rejected = Counter(
            "gpuplane_controller_dynamic_config_rejected",
            "Dynamic config updates rejected as invalid (the previous config stays in force).",
            registry=registry,
        )
        self.reloads = Counter(
            "gpuplane_controller_dynamic_config_reloads",
            "Dynamic config updates applied.",
            registry=registry,
        )

    async def start(self) -> None:
        s = self.settings
        if s.dynamic_config_path:
            self._load_file(first=True)
            self._task = asyncio.ensure_future(self._poll_file())
        elif s.dynamic_config_configmap:
            self._task = asyncio.ensure_future(self._watch_configmap())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _apply(self, text: str, origin: str) -> bool:
        if text == self._text:
            return True
        try:
            cfg = parse_config(text)
        except InvalidSpec as e:
            self.last_error = e.message
            self.rejected.inc()
            log.warning("rejected dynamic config from %s (keeping the previous one): %s", origin, e.message)
            self._text = text  # do not re-report the same bad content on every poll
            return False
        self.current, self.origin, self.last_error, self._text = cfg, origin, None, text
        self.reloads.inc()
        for listener in self.listeners:
            listener(cfg)
        log.info("dynamic config loaded from %s", origin)
        return True

    # ---- file ------------------------------------------------------------------------------------
    def _stat(self) -> tuple[float, int] | None:
        try:
            st = os.stat(self.settings.dynamic_config_path or "")
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def _load_file(self, first: bool = False) -> None:
        path = self.settings.dynamic_config_path or ""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            if first:
                log.warning("dynamic config file %s unreadable (%s); using defaults", path, e.strerror)
            return
        self._apply(text, f"file {path}")

    async def _poll_file(self) -> None:
        seen = self._stat()
        while True:
            await asyncio.sleep(self.settings.dynamic_config_poll_seconds)
            now = self._stat()
            if now is not None and now != seen:
                self._load_file()
            seen = now

    # ---- ConfigMap ---------------------------------------------------------------------------------
    async def _watch_configmap(self) -> None:
        s = self.settings
        name, ns = s.dynamic_config_configmap or "", s.dynamic_config_namespace
        selector = f"metadata.name={name}"
        async for ev in resumable_watch(
            _configmaps(self.api, ns), health=self.health, field_selector=selector
        ):
            await self._on_event(ev, name, ns)

    async def _on_event(self, ev: WatchEvent, name: str, ns: str) -> None:
        objs = ev.items if ev.type == "RELISTED" else [ev.object]
        for cm in objs:
            if not isinstance(cm, dict) or (cm.get("metadata") or {}).get("name") != name:
                continue
            if ev.type == "DELETED":
                log.warning("dynamic config ConfigMap %s/%s deleted; keeping the config in force", ns, name)
                continue
            text = config_text(cm)
            if text is None:
                ok, error = False, f"ConfigMap has no {CONFIG_KEY} key"
                self.last_error = error
                self.rejected.inc()
                log.warning("rejected dynamic config from ConfigMap %s/%s: %s", ns, name, error)
            else:
                ok = self._apply(text, f"ConfigMap {ns}/{name}")
                error = self.last_error or ""
            if not ok:
                await self._event(cm, error)

    async def _event(self, cm: dict[str, Any], message: str) -> None:
        meta = cm["metadata"]
        involved = {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        try:
            await record_event(
                client.CoreV1Api(self.api),
                involved,
                "InvalidDynamicConfig",
                f"rejected, previous config stays in force: {message}",
                component="tf-controller",
            )
        except ApiException as e:
            log.warning("could not record the invalid-config Event: %s", e.status)
