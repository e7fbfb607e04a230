"""Pure rules: kubeconfig and settings validation, GPU profiles, overview totals, prepull, cleanup."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpuplane_core.errors import GpuplaneError
from gpuplane_lens.domain import validation as v
from gpuplane_lens.domain.cleanup import may_delete_namespace
from gpuplane_lens.domain.overview import DiskUsage, hardware, node_role, node_summary, overview
from gpuplane_lens.domain.prepull import daemonset, images_for
from gpuplane_lens.domain.prepull import status as prepull_status
from gpuplane_lens.domain.versions import parse_profile, short_version, supported
from gpuplane_lens.main import load_profile
from gpuplane_lens.settings import Settings


def _kubeconfig(user: dict[str, Any] | None = None, cluster: dict[str, Any] | None = None) -> bytes:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": cluster or {"server": "https://10.0.0.1:6443"}}],
            "users": [{"name": "u", "user": user or {"token": "abc"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).encode()


def _code(fn: Any, *args: Any) -> str:
    with pytest.raises(GpuplaneError) as info:
        fn(*args)
    return info.value.code


def test_valid_kubeconfig_parses() -> None:
    assert v.parse_kubeconfig(_kubeconfig())["current-context"] == "x"


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xfe not utf-8",
        b"{unclosed: [",
        b"- just\n- a list\n",
        _kubeconfig(user={"exec": {"command": "/bin/sh"}}),
        _kubeconfig(user={"client-key": "/etc/shadow"}),
        _kubeconfig(cluster={"server": "https://x", "certificate-authority": "/etc/ca"}),
        _kubeconfig(cluster={"server": "ftp://x"}),
        yaml.safe_dump({"clusters": [], "contexts": [], "users": [], "current-context": "nope"}).encode(),
    ],
)
def test_bad_kubeconfigs_are_invalid_kubeconfig(data: bytes) -> None:
    with pytest.raises(GpuplaneError) as info:
        v.parse_kubeconfig(data)
    assert info.value.code == "invalid_kubeconfig"
    assert info.value.field == "file"


def test_proxy_rules() -> None:
    p = v.parse_proxy('{"mode":"custom","httpProxy":"http://p:3128","noProxy":".svc"}')
    assert (p.mode, p.http_proxy, p.https_proxy, p.no_proxy) == ("custom", "http://p:3128", "", ".svc")
    assert v.parse_proxy({}).mode == "auto"
    for bad in (
        "{not json",
        '"text"',
        '{"mode":"weird"}',
        '{"mode":"custom"}',
        '{"extra":1}',
        '{"httpProxy":"p:1"}',
    ):
        assert _code(v.parse_proxy, bad) == "invalid_proxy_config"


def test_gateway_namespace_suffix_is_added_once() -> None:
    assert v.gateway_namespace(None, "1234abcd") == "lens-gateway-1234abcd"
    assert v.gateway_namespace(v.gateway_prefix("custom", "1234abcd"), "1234abcd") == "custom-1234abcd"
    assert (
        v.gateway_namespace(v.gateway_prefix("custom-1234abcd", "1234abcd"), "1234abcd") == "custom-1234abcd"
    )
    assert v.gateway_prefix("", "1234abcd") is None
    assert _code(v.gateway_prefix, "Bad_Name", "1234abcd") == "invalid_gateway_namespace"
    assert _code(v.gateway_prefix, "a" * 60, "1234abcd") == "invalid_gateway_namespace"


def test_gateway_port_and_provider() -> None:
    assert v.check_gateway_port(30000) == 30000
    assert v.check_gateway_port(32767) == 32767
    assert _code(v.check_gateway_port, 29999) == "invalid_gateway_port"
    assert _code(v.check_gateway_port, 32768) == "invalid_gateway_port"
    assert _code(v.check_gateway_provider, "nginx") == "invalid_gateway_provider"


def test_token_rules() -> None:
    assert _code(v.check_token, "") == "invalid_secret_token"
    assert _code(v.check_token, "   ") == "invalid_secret_token"
    assert _code(v.check_token, None) == "invalid_secret_token"
    assert v.check_token(" hf_x ") == "hf_x"


def test_versions_file_and_comparison() -> None:
    profile = load_profile(Settings(data_dir="/nonexistent"))
    assert profile.raw["k8s_gateway_api"] == "v1.5.1"
    assert profile.raw["k8s_gateway_api_inference_extension"] == "v1.5.0"
    assert supported("v1.34.4", "v1.32.0")
    assert supported("v1.32.0", "v1.32.0")
    assert not supported("v1.31.9-gke.1", "v1.32.0")
    assert short_version("1", "34+", "v1.34.4") == "1.34"
    with pytest.raises(GpuplaneError):
        parse_profile({**profile.raw, "surprise": "x"})


def _node(
    name: str, capacity: dict[str, str], labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {
            "capacity": {"cpu": "64", "memory": "256Gi", **capacity},
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.34.0", "osImage": "Ubuntu"},
            "images": [{"names": ["reg/x@sha256:abc", "reg/x:1"]}],
        },
    }


def test_gpu_profiles_count_extended_resources_and_dra_once() -> None:
    nvidia = _node("n1", {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu.memory": "81559"})
    intel = _node("i1", {"gpu.intel.com/i915": "4", "gpu.intel.com/millicores": "4000"})
    dra_only = _node("d1", {})
    slices = [
        {
            "spec": {
                "nodeName": "i1",
                "driver": "gpu.intel.com",
                "devices": [{"name": f"g{i}"} for i in range(4)],
            }
        },
        {"spec": {"nodeName": "d1", "driver": "gpu.amd.com", "devices": [{"name": "g0"}, {"name": "g1"}]}},
        {"spec": {"nodeName": "d1", "driver": "other.example.com", "devices": [{"name": "x"}]}},
    ]
    result = overview([nvidia, intel, dra_only], slices, [], {}, None, None)
    by_name = {n["name"]: n for n in result["nodes"]}
    assert by_name["n1"]["gpuByProfile"] == {"nvidia": 8}
    assert by_name["n1"]["vramBytes"] == 8 * 81559 * 1024 * 1024
    assert by_name["i1"]["gpuByProfile"] == {"intel-xpu": 4}  # DRA and the extended resource: counted once
    assert by_name["d1"]["gpuByProfile"] == {"amd": 2}
    assert by_name["n1"]["cachedImages"] == ["reg/x:1"]
    hw = result["hardware"]
    assert hw["accelerators"] == [
        {"id": "amd", "gpuCount": 2},
        {"id": "intel-xpu", "gpuCount": 4},
        {"id": "nvidia", "gpuCount": 8},
    ]
    assert (hw["gpuCount"], hw["totalGpuCount"], hw["gpuNodes"]) == (14, 14, 3)


def test_control_plane_needs_label_and_noschedule_taint() -> None:
    label = {"node-role.kubernetes.io/control-plane": ""}
    taint = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert node_role(_node("a", {}, label, taints=taint)) == "control-plane"
    assert node_role(_node("b", {}, label)) == "worker"
    assert node_role(_node("c", {}, {}, taints=taint)) == "worker"


def test_hardware_allocation_disk_and_memory() -> None:
    nodes = [
        _node("a", {"nvidia.com/gpu": "8"}),
        _node("b", {"nvidia.com/gpu": "8"}, unschedulable=True),
    ]
    summaries = [node_summary(n, None) for n in nodes]
    gpu_pod = {
        "spec": {"nodeName": "a", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "3"}}}]},
        "status": {"phase": "Running"},
    }
    done_pod = {**gpu_pod, "status": {"phase": "Succeeded"}}
    disk = {"a": DiskUsage(1000, 250, 750), "b": DiskUsage(1000, 750, 250)}
    hw = hardware(nodes, summaries, [gpu_pod, done_pod], disk, 25.0)
    assert (hw["allocatedGpuCount"], hw["usableGpuCount"], hw["availableGpuCount"]) == (3, 8, 5)
    assert (hw["diskBytes"], hw["diskUsedBytes"], hw["diskAvailableBytes"], hw["diskUsagePercent"]) == (
        2000,
        1000,
        1000,
        50.0,
    )
    assert hw["memoryBytes"] == 2 * 256 * 2**30
    assert hw["memoryAvailableBytes"] == int(hw["memoryBytes"] * 0.75)
    # One Ready node without a Summary reading: disk is unknown (null), never a partial sum.
    partial = hardware(nodes, summaries, [], {"a": DiskUsage(1000, 250, 750)}, None)
    assert partial["diskBytes"] is None and partial["memoryUsagePercent"] is None


def test_prepull_images_and_daemonset() -> None:
    profile = load_profile(Settings(data_dir="/nonexistent"))
    images = images_for(profile, ["nvidia", "intel", "nvidia"])
    assert images == [
        "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.11.0",
        "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.11.0",
        "ghcr.io/llm-d/llm-d-inference-payload-processor:v0.1.0",
        "ghcr.io/llm-d/llm-d-cuda:v0.10.0",
        "ghcr.io/llm-d/llm-d-xpu:v0.10.0",
    ]
    with pytest.raises(GpuplaneError) as info:
        images_for(profile, ["tpu"])
    assert info.value.code == "invalid_accelerator"
    ds = daemonset("p", "ns", images, "busybox")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True and pod["tolerations"] == [{"operator": "Exists"}]
    assert len(pod["containers"]) == 5
    assert all(c["securityContext"]["privileged"] for c in pod["containers"])
    assert "crictl pull ghcr.io/llm-d/llm-d-cuda:v0.10.0" in pod["containers"][3]["command"][2]


def test_prepull_status_ready_pulling_failed() -> None:
    profile = load_profile(Settings(data_dir="/nonexistent"))
    ds = daemonset("p", "ns", images_for(profile, []), "busybox")
    ds["status"] = {"desiredNumberScheduled": 2}
    names = [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]]

    def pod(node: str, ready: bool, restarts: int = 0) -> dict[str, Any]:
        return {
            "spec": {"nodeName": node},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": str(ready)}],
                "containerStatuses": [{"name": n, "ready": ready, "restartCount": restarts} for n in names],
            },
        }

    assert prepull_status(ds, [pod("a", True), pod("b", True)])["state"] == "ready"
    pulling = prepull_status(ds, [pod("a", True), pod("b", False, 2)])
    assert pulling["state"] == "pulling" and pulling["ready"] == 1
    assert pulling["images"][0] == {
        "name": "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.11.0",
        "ready": 1,
        "desired": 2,
        "state": "pulling",
    }
    failed = prepull_status(ds, [pod("a", True), pod("b", False, 3)])
    assert failed["state"] == "failed"
    assert failed["nodes"][1] == {"node": "b", "phase": "Running", "ready": False, "restarts": 3}
    assert prepull_status(None, [])["state"] == "idle"


def test_namespace_cleanup_rules() -> None:
    injected = [
        ("ServiceAccount", {"metadata": {"name": "default"}}),
        ("ConfigMap", {"metadata": {"name": "kube-root-ca.crt"}}),
    ]
    other = [*injected, ("ConfigMap", {"metadata": {"name": "mine"}})]
    cr = [*injected, ("Widget", {"metadata": {"name": "w"}})]
    assert may_delete_namespace("llm-d-bench-storage-abcd1234", "abcd1234", {}, False, other)
    assert may_delete_namespace("x", "abcd1234", {}, True, other)
    assert may_delete_namespace("x", "abcd1234", {"app.kubernetes.io/managed-by": "llm-d-lens"}, False, other)
    assert may_delete_namespace("x", "abcd1234", {}, False, injected)
    assert not may_delete_namespace("x", "abcd1234", {}, False, other)
    assert not may_delete_namespace("x", "abcd1234", {}, False, cr)
    assert not may_delete_namespace("x", "abcd1234", {}, False, None)  # could not list: keep
    for protected in ("default", "kube-system", "kube-public", "kube-node-lease"):
        assert not may_delete_namespace(protected, "abcd1234", {}, True, [])


def test_component_status() -> None:
    from gpuplane_lens.domain.overview import components

    def ds(name: str, ready: int, desired: int) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "status": {"numberReady": ready, "desiredNumberScheduled": desired},
        }

    got = components(
        {"DaemonSet": [ds("nvidia-device-plugin-daemonset", 2, 3), ds("intel-gpu-plugin", 0, 0)]}
    )
    assert got["nvidiaDevicePlugin"] == {"installed": True, "ready": 2, "desired": 3, "status": "degraded"}
    assert got["intelDevicePlugin"]["status"] == "pending"
    assert got["amdDevicePlugin"] == {"installed": False, "ready": 0, "desired": 0, "status": "missing"}
    prom = {
        "metadata": {"name": "prometheus-server"},
        "spec": {"replicas": 1},
        "status": {"readyReplicas": 1},
    }
    assert components({"Deployment": [prom]})["monitoring"]["status"] == "ready"
