"""Wiring of the node scaler, the dynamic config and hypervisor heartbeat tracking (issue 4's
operational half); `main.lifespan` creates one and starts/stops it with the controller."""

from __future__ import annotations

from fastapi import FastAPI
from kubernetes_asyncio import client

from gpuplane_controller.domain.dynconfig import DynamicConfig
from gpuplane_controller.k8s.dynconfig import DynamicConfigSource
from gpuplane_controller.k8s.expander import NodeExpander
from gpuplane_controller.k8s.heartbeats import Heartbeats
from gpuplane_controller.k8s.runtime import Controller
from gpuplane_controller.settings import Settings


def is_leader(app: FastAPI) -> bool:
    """This replica leads (or runs without leader election, where `app.state.leader` may be absent)."""
    leader = getattr(app.state, "leader", None)
    return leader is None or bool(leader.is_leader)


class Operations:
    def __init__(
        self, app: FastAPI, api: client.ApiClient, settings: Settings, controller: Controller
    ) -> None:
        def leading() -> bool:
            return is_leader(app)

        self.heartbeats = Heartbeats(api, app.state.cluster, settings, leading)
        self.dynconfig = DynamicConfigSource(settings, api, app.state.metrics_registry)
        app.state.dynconfig = self.dynconfig
        state = app.state.cluster

        def apply_scheduler(cfg: DynamicConfig) -> None:
            s = cfg.scheduler
            state.set_scheduler_defaults(s.vram_weight, s.tflops_weight, s.max_worker_per_node)
            controller.capacity_changed()

        self.dynconfig.listeners.append(apply_scheduler)
        self.expander: NodeExpander | None = None
        if settings.enable_auto_expander:
            self.expander = NodeExpander(api, app.state.cluster, controller, settings, leading)
            app.state.expander = self.expander

    async def start(self) -> None:
        await self.dynconfig.start()
        await self.heartbeats.start()
        if self.expander is not None:
            await self.expander.start()

    async def stop(self) -> None:
        if self.expander is not None:
            await self.expander.stop()
        await self.heartbeats.stop()
        await self.dynconfig.stop()
