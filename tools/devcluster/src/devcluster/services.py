"""gpuplane services as subprocesses against a devcluster, for tests and benchmarks.

Each service is started through its console script with its own env prefix,
ephemeral ports on 127.0.0.1, and waited on until `/readyz` answers 200.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServiceProcess:
    def __init__(
        self,
        script: str,
        env_prefix: str,
        kubeconfig: str | Path,
        *,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
    ) -> None:
        self.script = script
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.args = args or []
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            f"{env_prefix}HTTP_HOST": "127.0.0.1",
            f"{env_prefix}HTTP_PORT": str(self.http_port),
            f"{env_prefix}GRPC_HOST": "127.0.0.1",
            f"{env_prefix}GRPC_PORT": str(self.grpc_port),
            f"{env_prefix}LOG_JSON": "false",
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def controller(cls, kubeconfig: str | Path, **kw: dict[str, str]) -> ServiceProcess:
        return cls("tf-controller", "GPUPLANE_CONTROLLER_", kubeconfig, **kw)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = 60.0) -> ServiceProcess:
        """Start (again, after `stop`) and wait until ready; the ports stay the same."""
        exe = os.path.join(os.path.dirname(sys.executable), self.script)
        self.proc = subprocess.Popen([exe, *self.args], env=self.env)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.script} exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.script} not ready at {self.url} after {timeout}s")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
