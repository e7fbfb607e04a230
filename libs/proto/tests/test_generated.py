"""The committed generated code matches proto/ and exposes the services the flows rely on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpuplane.controller.v1 import capacity_pb2, node_agent_pb2, types_pb2

ROOT = Path(__file__).resolve().parents[3]


def test_generated_code_is_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_services_and_methods() -> None:
    node_agent = node_agent_pb2.DESCRIPTOR.services_by_name["NodeAgentService"]
    assert sorted(m.name for m in node_agent.methods) == ["Heartbeat", "RegisterNode", "WatchAllocations"]
    assert node_agent.methods_by_name["WatchAllocations"].server_streaming
    capacity = capacity_pb2.DESCRIPTOR.services_by_name["CapacityService"]
    assert sorted(m.name for m in capacity.methods) == [
        "GetPoolCapacity",
        "ListGpuAllocations",
        "SimulateSchedule",
    ]
    assert capacity.full_name == "gpuplane.controller.v1.CapacityService"


def test_quantities_are_strings() -> None:
    """Resource amounts keep Kubernetes quantity text exactly (no float rounding)."""
    resources = types_pb2.Resources(tflops="0.1", vram="1500Mi")
    again = types_pb2.Resources.FromString(resources.SerializeToString())
    assert (again.tflops, again.vram) == ("0.1", "1500Mi")
