"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

A candidate takes the Lease when it is free (no holder) or when its record has not changed
for `leaseDurationSeconds` as measured on the candidate's own monotonic clock (no trust in
other machines' clocks). The leader renews every `retry_period`; when it could not renew for
`renew_deadline` (< lease duration) it steps down on its own, before anybody else may take
over. On a clean stop the leader releases the Lease so a successor starts at once.

Consumers use `is_leader` and `await wait_until_leader()` / `wait_until_follower()`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_controller.k8s.events import micro_now
from gpuplane_core.k8s.raw import call_json

log = logging.getLogger(__name__)


class AlwaysLeader:
    """Leader election switched off (one replica): always the leader."""

    is_leader = True
    identity = "standalone"

    async def wait_until_leader(self) -> None:
        return None

    async def wait_until_follower(self) -> None:
        await asyncio.Event().wait()

    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


class LeaderElector:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election needs retry_period < renew_deadline < lease_duration")
        self.coord = client.CoordinationV1Api(api)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration, self.renew_deadline, self.retry_period = (
            lease_duration,
            renew_deadline,
            retry_period,
        )
        self._on_change = on_change
        self._leading = asyncio.Event()
        self._following = asyncio.Event()
        self._following.set()
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._task: asyncio.Task[None] | None = None
        self.transitions = 0
        self._failing = False

    # ---- the contract other parts rely on ------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        # Also checked against the clock: a process that was frozen (SIGSTOP, a long GC, a
        # suspended VM) past its renew deadline must not act on its first instructions after.
        if self._leading.is_set() and time.monotonic() - self._last_renew >= self.renew_deadline:
            self._set(False)
        return self._leading.is_set()

    async def wait_until_leader(self) -> None:
        await self._leading.wait()

    async def wait_until_follower(self) -> None:
        await self._following.wait()

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.is_leader:
            self._set(False)
            await self._release()

    def _set(self, leading: bool) -> None:
        if leading == self._leading.is_set():
            return
        if leading:
            self._following.clear()
            self._leading.set()
            self.transitions += 1
        else:
            self._leading.clear()
            self._following.set()
        log.info(
            "leadership %s",
            "acquired" if leading else "lost",
            extra={"identity": self.identity, "lease": self.name},
        )
        if self._on_change is not None:
            self._on_change(leading)

    async def _run(self) -> None:
        while True:
            try:
                # Bounded: a hung apiserver call must not keep us leading past the deadline.
                ok = await asyncio.wait_for(self._try_acquire_or_renew(), self.renew_deadline / 2)
                self._failing = False
            except (TimeoutError, ApiException, OSError, aiohttp.ClientError) as e:
                # Once per outage at warning level: retries every retry_period would flood the log.
                level = logging.DEBUG if self._failing else logging.WARNING
                log.log(level, "lease %s/%s: %s", self.namespace, self.name, getattr(e, "status", None) or e)
                ok, self._failing = False, True
            except Exception:  # an unexpected reply must not end the election loop
                log.exception("lease %s/%s: unexpected error", self.namespace, self.name)
                ok = False
            now = time.monotonic()
            if ok:
                self._last_renew = now
                self._set(True)
            elif self.is_leader and now - self._last_renew >= self.renew_deadline:
                self._set(False)  # could not renew in time: stop acting before anyone may take over
            await asyncio.sleep(self.retry_period)

    # ---- one round ---------------------------------------------------------------------------------
    def _spec(self, old: dict[str, Any] | None) -> dict[str, Any]:
        now = micro_now()
        old = old or {}
        mine = old.get("holderIdentity") == self.identity
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": old.get("acquireTime") if mine and old.get("acquireTime") else now,
            "renewTime": now,
            "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if mine else 1),
        }

    async def _get(self) -> dict[str, Any] | None:
        try:
            return await call_json(self.coord.read_namespaced_lease, self.name, self.namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def _try_acquire_or_renew(self) -> bool:
        lease = await self._get()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None),
            }
            try:
                await call_json(self.coord.create_namespaced_lease, self.namespace, body)
            except ApiException as e:
                if e.status == 409:
                    return False  # someone else created it first
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (
            holder,
            spec.get("renewTime"),
            spec.get("leaseDurationSeconds"),
            spec.get("leaseTransitions"),
        )
        now = time.monotonic()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        if holder and holder != self.identity:
            if self.is_leader:
                self._set(False)  # somebody else holds it: we lost it
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if now - self._observed_at < duration:
                return False
        lease["spec"] = self._spec(spec)
        try:
            await call_json(self.coord.replace_namespaced_lease, self.name, self.namespace, lease)
        except ApiException as e:
            if e.status == 409:
                return False  # the record changed under us: re-read next round
            raise
        return True

    async def _release(self) -> None:
        try:
            lease = await self._get()
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = lease["spec"]
            spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=micro_now())
            await call_json(self.coord.replace_namespaced_lease, self.name, self.namespace, lease)
        except (TimeoutError, ApiException, OSError, aiohttp.ClientError) as e:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, e)
