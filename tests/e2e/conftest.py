"""Session fixture `platform`: `scripts/run_platform.py` (what `make run` runs) on its own
devcluster with ephemeral ports; stopped with Ctrl-C at the end (see e2e_platform.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from e2e_platform import ROOT, START_TIMEOUT, RunningPlatform, alive, pump_lines

from devcluster.cluster import ORDER, DevCluster
from devcluster.pytest_plugin import TEST_CLUSTER
from devcluster.stack import port_in_use


@pytest.fixture(scope="session")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlatform]:
    name = f"{TEST_CLUSTER}-e2e"
    DevCluster(name).down(progress=lambda _m: None)  # a clean slate: no jobs left from an earlier run
    state = tmp_path_factory.mktemp("platform")
    endpoints_file = state / "endpoints.json"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "run_platform.py"), "--cluster", name,
         "--ephemeral-ports", "--state-dir", str(state)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, like a terminal's foreground job
    )  # fmt: skip
    output: list[str] = []
    pump = threading.Thread(target=pump_lines, args=(proc.stdout, output), daemon=True)
    pump.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not endpoints_file.exists():
            if proc.poll() is not None:
                pytest.fail(f"run_platform.py exited {proc.returncode}:\n" + "\n".join(output[-40:]))
            if time.monotonic() > deadline:
                pytest.fail("run_platform.py not ready in time:\n" + "\n".join(output[-40:]))
            time.sleep(0.25)
        running = RunningPlatform(json.loads(endpoints_file.read_text()), output)
        yield running

        # Ctrl-C: the terminal signals the whole foreground process group.
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(90)
        pump.join(5)
        log = "\n".join(output[-30:])
        assert rc == 0, f"run_platform.py exited {rc} on Ctrl-C:\n{log}"
        left = [s["name"] for s in running.endpoints["services"] if alive(int(s["pid"]))]
        assert not left, f"still running after Ctrl-C: {left}"
        cluster = DevCluster(name)
        assert not [c for c in ORDER if cluster.procs.alive(c)], "cluster processes left after Ctrl-C"
        ports = [int(s["url"].rsplit(":", 1)[1]) for s in running.endpoints["services"]]
        ports += [int(s["grpc"].rsplit(":", 1)[1]) for s in running.endpoints["services"] if "grpc" in s]
        assert not [p for p in ports if port_in_use(p)], "ports still bound after Ctrl-C"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if os.environ.get("GPUPLANE_KEEP_DEVCLUSTER") != "1":
            DevCluster(name).down(progress=lambda _m: None)
