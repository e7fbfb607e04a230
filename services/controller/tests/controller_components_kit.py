"""Helpers of the component-endpoint tests: `tf-controller` processes whose Lease, ledger and
allowed ServiceAccount live in the test's namespace (so tests never share a Lease)."""

from __future__ import annotations

import contextlib
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from devcluster.services import ServiceProcess

CONTROLLER_SA = "tf-controller"
# Short Lease timings so failover tests take seconds, not the default 15 s.
FAST_LEASE = {
    "GPUPLANE_CONTROLLER_LEASE_DURATION_SECONDS": "4",
    "GPUPLANE_CONTROLLER_RENEW_DEADLINE_SECONDS": "3",
    "GPUPLANE_CONTROLLER_RETRY_PERIOD_SECONDS": "0.5",
}


@dataclass
class Ctl:
    proc: ServiceProcess
    sa: str
    identity: str

    @property
    def url(self) -> str:
        return self.proc.url

    def is_leader(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=2) as r:
            return "gpuplane_controller_leader 1.0" in r.read().decode()

    def wait_leader(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not self.is_leader():
            assert time.monotonic() < deadline, f"{self.identity} did not become leader in {timeout}s"
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, the Lease is not released."""
        assert self.proc.proc is not None
        self.proc.proc.kill()
        self.proc.proc.wait()
        self.proc.proc = None


def controller_env(namespace: str, identity: str, env: dict[str, str] | None = None) -> dict[str, str]:
    return {
        "GPUPLANE_CONTROLLER_LEASE_NAMESPACE": namespace,
        "GPUPLANE_CONTROLLER_LEADER_IDENTITY": identity,
        "GPUPLANE_CONTROLLER_COMPONENT_SERVICE_ACCOUNT": f"system:serviceaccount:{namespace}:{CONTROLLER_SA}",
        **FAST_LEASE,
        **(env or {}),
    }


def start_controller(
    devcluster: Any, namespace: str, identity: str = "ctl-a", env: dict[str, str] | None = None
) -> Ctl:
    proc = ServiceProcess.controller(devcluster.kubeconfig, env=controller_env(namespace, identity, env))
    proc.start()
    return Ctl(proc, CONTROLLER_SA, identity)


@contextlib.contextmanager
def component_controller(
    devcluster: Any, namespace: str, identity: str = "ctl-a", env: dict[str, str] | None = None
) -> Iterator[Ctl]:
    ctl = start_controller(devcluster, namespace, identity, env)
    try:
        ctl.wait_leader()
        yield ctl
    finally:
        ctl.proc.stop()
