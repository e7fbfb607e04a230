"""Wiring of leader election and the component endpoints' back ends (connection informer
and reconciler, host port / index assignments) into the app and the scheduler runtime.

`app.state.leader` exposes `is_leader` and `wait_until_leader()` to every other part."""

from __future__ import annotations

import copy
import logging
import os
import socket
import uuid

from fastapi import FastAPI
from kubernetes_asyncio import client
from prometheus_client import Gauge

from gpuplane_controller.domain.hostports import parse_port_range
from gpuplane_controller.k8s.assignments import Assignments
from gpuplane_controller.k8s.connections import ConnectionHub, ConnectionReconciler
from gpuplane_controller.k8s.leader import AlwaysLeader, LeaderElector
from gpuplane_controller.k8s.reviewer import ControllerReviewer
from gpuplane_controller.k8s.runtime import Controller
from gpuplane_controller.settings import Settings

log = logging.getLogger(__name__)


def lease_namespace(settings: Settings) -> str:
    return settings.lease_namespace or os.environ.get("POD_NAMESPACE") or "default"


def leader_identity(settings: Settings) -> str:
    return settings.leader_identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4()}"


class Components:
    def __init__(self, app: FastAPI, api: client.ApiClient, settings: Settings) -> None:
        gauge = Gauge(
            "gpuplane_controller_leader",
            "1 while this replica holds the controller's leader Lease",
            registry=app.state.metrics_registry,
        )
        namespace = lease_namespace(settings)

        def on_change(leading: bool) -> None:
            gauge.set(1 if leading else 0)

        self.leader: LeaderElector | AlwaysLeader
        self._lease_api: client.ApiClient | None = None
        if settings.leader_elect:
            # Lease renewals get connections of their own: a burst of TokenReviews or binds on
            # the shared pool must not delay them past the renew deadline.
            cfg = copy.deepcopy(api.configuration)
            cfg.connection_pool_maxsize = 2
            self._lease_api = client.ApiClient(configuration=cfg)
            self.leader = LeaderElector(
                self._lease_api,
                name=settings.lease_name,
                namespace=namespace,
                identity=leader_identity(settings),
                lease_duration=settings.lease_duration_seconds,
                renew_deadline=settings.renew_deadline_seconds,
                retry_period=settings.retry_period_seconds,
                on_change=on_change,
            )
        else:
            self.leader = AlwaysLeader()
            gauge.set(1)
        self.hub = ConnectionHub(api)
        self.reconciler = ConnectionReconciler(self.hub, self.leader)
        self.api = api
        self.settings = settings
        self.namespace = namespace
        self.assignments: Assignments | None = None
        app.state.leader = self.leader
        app.state.connections = self.hub
        if getattr(app.state, "token_reviewer", None) is None:
            app.state.token_reviewer = ControllerReviewer(api, settings.token_review_ttl_seconds)
        self.app = app

    def attach(self, controller: Controller) -> None:
        """Feed the scheduler's pod informer to the parts that need pod events."""
        self.assignments = Assignments(
            self.api,
            self.leader,
            namespace=self.namespace,
            ledger=self.settings.assignment_ledger,
            port_range=parse_port_range(self.settings.cluster_host_port_range),
            grace=self.settings.assignment_grace_seconds,
            pods_synced=controller.pods_synced,
        )
        self.app.state.assignments = self.assignments
        controller.pod_listeners += [self.assignments.on_pod_event, self.reconciler.on_pod_event]

    def start(self) -> None:
        self.hub.start()
        self.reconciler.start()
        if self.assignments is not None:
            self.assignments.start()
        self.leader.start()

    async def stop(self) -> None:
        """After the scheduler stopped: release the Lease last so a successor starts at once."""
        if self.assignments is not None:
            await self.assignments.stop()
        await self.reconciler.stop()
        await self.hub.stop()
        await self.leader.stop()
        if self._lease_api is not None:
            await self._lease_api.close()
