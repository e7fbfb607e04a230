"""What `make run` starts (devcluster.stack.plan), checked without starting anything."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.stack import (
    EXAMPLE_TRAINING_JOB,
    Platform,
    Ports,
    Service,
    default_pool,
    plan,
    simulated_devices,
)
from gpuplane_controller.settings import Settings as ControllerSettings
from gpuplane_gpuctl.settings import Settings as GpuctlSettings
from gpuplane_hypervisor.settings import Settings as HypervisorSettings
from gpuplane_lens.settings import Settings as LensSettings

ROOT = Path(__file__).resolve().parents[2]
NODES = ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
SETTINGS = {
    "controller": ControllerSettings,
    "hypervisor": HypervisorSettings,
    "gpuctl": GpuctlSettings,
    "lens": LensSettings,
}


def _plan(tmp_path: Path, ports: Ports) -> list[Service]:
    return plan(
        kubeconfig=tmp_path / "kubeconfig",
        ports=ports,
        state_dir=tmp_path,
        nodes=NODES,
        devices=simulated_devices(8, "H100"),
    )


def test_standard_ports_are_the_documented_ones() -> None:
    p = Ports.standard(3)
    assert p.controller_http == (8080, 8081) and p.hypervisor_http == (8001, 8002, 8003)
    assert (p.gpuctl_http, p.lens_http) == (8000, 8090)
    assert len(set(p.all())) == len(p.all())
    with pytest.raises(ValueError):
        Ports.standard(200)


def test_every_service_reads_its_planned_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The env each process gets is parsed by that service's own Settings, as in the process."""
    services = _plan(tmp_path, Ports.standard(3))
    assert [s.kind for s in services].count("controller") == 2
    seen: dict[str, list[Any]] = {}
    for svc in services:
        with monkeypatch.context() as m:
            for k, v in svc.env.items():
                m.setenv(k, v)
            settings = SETTINGS[svc.kind]()
        assert settings.http_port == svc.http_port and settings.http_host == "127.0.0.1"
        seen.setdefault(svc.kind, []).append(settings)

    controllers = seen["controller"]
    assert len({c.leader_identity for c in controllers}) == 2, "each replica needs its own identity"
    assert all(c.leader_elect for c in controllers)
    grpc_ports = sorted(c.grpc_port for c in controllers)
    assert len(set(grpc_ports)) == 2

    hyps = seen["hypervisor"]
    assert sorted(h.node_name for h in hyps) == NODES
    assert all(h.backend == "simulated" and h.simulated_devices == "8xH100-80GB" for h in hyps)
    assert len({h.state_file for h in hyps}) == 3
    assert all(Path(h.state_file).is_relative_to(tmp_path) for h in hyps)
    # Hypervisors and gpuctl reach every controller replica (gRPC fails over between them).
    targets = {h.controller for h in hyps} | {seen["gpuctl"][0].controller_address}
    assert len(targets) == 1
    assert sorted(int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", targets.pop() or "")) == grpc_ports
    assert seen["lens"][0].data_dir.is_relative_to(tmp_path)


def test_ephemeral_ports_avoid_the_standard_ones() -> None:
    ports = Ports.ephemeral(3)
    assert not set(ports.all()) & set(Ports.standard(3).all())
    assert len(set(ports.all())) == len(ports.all())


def test_default_pool_selects_the_devcluster_gpu_nodes() -> None:
    pool = default_pool()
    assert pool["metadata"]["annotations"]["tensor-fusion.ai/is-default-pool"] == "true"
    exprs = pool["spec"]["nodeManagerConfig"]["nodeSelector"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]} in exprs


def test_banner_examples_exist(tmp_path: Path) -> None:
    banner = Platform("unit", ports=Ports.ephemeral(3), state_dir=tmp_path).banner(leader="controller-0")
    for path in re.findall(r"examples/[\w.-]+\.yaml", banner):
        assert (ROOT / path).is_file(), path
    assert "controller-0 (gRPC" in banner and ", leader)" in banner
    training = yaml.safe_load((ROOT / "examples" / "training.yaml").read_text())
    assert training["job"]["name"] == EXAMPLE_TRAINING_JOB
