"""Helpers of the chart tests: run the helm binary built from its Go module, parse what it renders."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpuplane"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
BAD_VALUES = Path(__file__).resolve().parent / "values"
MONITORING_API = "monitoring.coreos.com/v1/ServiceMonitor"

# Service -> (env prefix, Settings import path, console script).
SERVICES: dict[str, tuple[str, str, str]] = {
    "controller": ("GPUPLANE_CONTROLLER_", "gpuplane_controller.settings", "tf-controller"),
    "hypervisor": ("GPUPLANE_HYPERVISOR_", "gpuplane_hypervisor.settings", "tf-hypervisor"),
    "gpuctl": ("GPUPLANE_GPUCTL_", "gpuplane_gpuctl.settings", "gpuctl-server"),
    "lens": ("GPUPLANE_LENS_", "gpuplane_lens.settings", "lens-server"),
}


@dataclass(frozen=True)
class HelmResult:
    rc: int
    stdout: str
    stderr: str


class Helm:
    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        # Keep helm's config/cache/data away from the user's (and from other test runs).
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, *args: str, kubeconfig: Path | None = None, timeout: float = 180) -> HelmResult:
        env = dict(self.env)
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        p = subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=env, timeout=timeout
        )
        return HelmResult(p.returncode, p.stdout, p.stderr)

    def template(
        self,
        *values: Path,
        sets: tuple[str, ...] = (),
        api_versions: tuple[str, ...] = (),
        namespace: str = "gpuplane-system",
        release: str = "gp",
        include_crds: bool = False,
    ) -> HelmResult:
        args = ["template", release, str(CHART), "--namespace", namespace]
        for v in values:
            args += ["-f", str(v)]
        for s in sets:
            args += ["--set", s]
        for a in api_versions:
            args += ["--api-versions", a]
        if include_crds:
            args.append("--include-crds")
        return self.run(*args)

    def render(self, *values: Path, **kw: Any) -> list[dict[str, Any]]:
        r = self.template(*values, **kw)
        assert r.rc == 0, f"helm template failed:\n{r.stderr}"
        return [d for d in yaml.safe_load_all(r.stdout) if d]


def find(docs: list[dict[str, Any]], kind: str, component: str | None = None) -> list[dict[str, Any]]:
    out = [d for d in docs if d["kind"] == kind]
    if component is not None:
        out = [
            d for d in out if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
        ]
    return out


def one(docs: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    found = find(docs, kind, component)
    assert len(found) == 1, f"expected one {kind} for {component}, got {len(found)}"
    return found[0]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def plain_env(c: dict[str, Any], field_values: dict[str, str] | None = None) -> dict[str, str]:
    """The container's env as a process would see it, fieldRefs resolved from `field_values`."""
    out: dict[str, str] = {}
    for e in c.get("env", []):
        if "value" in e:
            out[e["name"]] = str(e["value"])
        elif "fieldRef" in e.get("valueFrom", {}):
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            out[e["name"]] = (field_values or {}).get(path, f"from-{path}")
    return out


class LoggedService:
    """A service's console script on 127.0.0.1 ephemeral ports, its output kept in a log file
    (the RBAC test reads it for API refusals)."""

    def __init__(self, component: str, kubeconfig: Path, env: dict[str, str], log: Path) -> None:
        from devcluster.services import free_port

        prefix, _, script = SERVICES[component]
        self.script = script
        self.log = log
        self.http_port, self.grpc_port = free_port(), free_port()
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "KUBECONFIG": str(kubeconfig),
            **env,
            f"{prefix}HTTP_HOST": "127.0.0.1",
            f"{prefix}HTTP_PORT": str(self.http_port),
            f"{prefix}GRPC_HOST": "127.0.0.1",
            f"{prefix}GRPC_PORT": str(self.grpc_port),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def launch(self) -> LoggedService:
        import sys

        exe = str(Path(sys.executable).parent / self.script)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([exe], env=self.env, stdout=out, stderr=out)
        return self

    def wait_ready(self, timeout: float = 90) -> None:
        import time
        import urllib.error
        import urllib.request

        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{self.script} exited:\n{self.log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"{self.script} not ready after {timeout}s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
