"""Helpers of the reliability suite: every service started the way it runs in production
(its console script, a real uvicorn server on 127.0.0.1 with ephemeral ports), its log captured
and its resident memory readable, so a test can assert on responses, logs and memory at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.services import ServiceProcess

LENS_HOSTS = ["10.1.2.3"]

# Hostile documents: each must be refused with a 4xx by every parser of user YAML/JSON.
BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
kind: Pod
spec: *i
"""
DEEP = 50_000
DEEP_YAML = "kind: Pod\nspec: " + "[" * DEEP + "]" * DEEP + "\n"
# Block style: each level indented one more space (600 levels, ~180 kB: under every size cap).
DEEP_BLOCK_YAML = "kind: Pod\nspec:\n" + "".join(f"{' ' * (i + 1)}k{i}:\n" for i in range(600))
DEEP_JSON = '{"kind": "Pod", "spec": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}"
YAML_BOMBS = {
    "billion-laughs": BILLION_LAUGHS,
    "deep-flow": DEEP_YAML,
    "deep-block": DEEP_BLOCK_YAML,
    "deep-json": DEEP_JSON,
}


class LoggedService(ServiceProcess):
    """A `ServiceProcess` whose stdout and stderr go to a file the test can read."""

    def __init__(self, *args: Any, log_file: Path, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.log_file = log_file

    def start(self, timeout: float = 120.0) -> LoggedService:
        exe = os.path.join(os.path.dirname(sys.executable), self.script)
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen([exe, *self.args], env=self.env, stdout=log, stderr=log)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def rss_bytes(self) -> int:
        """Resident set size of the server process (VmRSS from /proc)."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False


def service(name: str, kubeconfig: str | Path, work: Path, **env: str) -> LoggedService:
    """An unstarted service `name` (controller, hypervisor, gpuctl, lens) on the devcluster."""
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / f"{name}.log"
    if name == "controller":
        return LoggedService("tf-controller", "GPUPLANE_CONTROLLER_", kubeconfig, env=env, log_file=log_file)
    if name == "hypervisor":
        base = {
            "GPUPLANE_HYPERVISOR_BACKEND": "simulated",
            "GPUPLANE_HYPERVISOR_SIMULATED_DEVICES": "2xH100-80GB",
            "GPUPLANE_HYPERVISOR_STATE_FILE": str(work / "hypervisor-state.json"),
            "GPUPLANE_HYPERVISOR_NODE_NAME": "gpu-node-0",
        }
        return LoggedService(
            "tf-hypervisor", "GPUPLANE_HYPERVISOR_", kubeconfig, env={**base, **env}, log_file=log_file
        )
    if name == "gpuctl":
        return LoggedService("gpuctl-server", "GPUPLANE_GPUCTL_", kubeconfig, env=env, log_file=log_file)
    if name == "lens":
        base = {
            "GPUPLANE_LENS_DATA_DIR": str(work / "lens-data"),
            "GPUPLANE_LENS_LENS_HOSTS": json.dumps(LENS_HOSTS),
            # Fuzzed bootstrap bodies name random hosts: fail their SSH checks fast.
            "GPUPLANE_LENS_BOOTSTRAP_CHECK_TIMEOUT_S": "1",
            "GPUPLANE_LENS_PROBE_TIMEOUT_S": "2",
            "GPUPLANE_LENS_REQUEST_TIMEOUT_S": "5",
        }
        return LoggedService(
            "lens-server", "GPUPLANE_LENS_", kubeconfig, env={**base, **env}, log_file=log_file
        )
    raise ValueError(name)


@pytest.fixture(scope="module", name="services")
def shared_services(
    devcluster: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, LoggedService]]:
    """All four services with default settings, for the fuzz and hostile-input tests (import
    this fixture into the test module; tests that need other settings start their own).
    Module scope, not session: a controller left running would schedule every
    tensor-fusion-scheduler pod of later tests' namespaces as well."""
    work = tmp_path_factory.mktemp("services")
    started: dict[str, LoggedService] = {}
    try:
        for name in ("controller", "hypervisor", "gpuctl", "lens"):
            started[name] = service(name, devcluster.kubeconfig, work).start()
        yield started
    finally:
        for svc in started.values():
            svc.stop()


def wait_until(check: Any, timeout: float = 10.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)
