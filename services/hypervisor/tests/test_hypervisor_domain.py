"""Pure domain logic: model table, specs, allocation stream state, limiter maths, cost, line protocol."""

from __future__ import annotations

import math

import pytest
from hypervisor_testkit import GIB, allocation

from gpuplane_core.errors import Conflict, NotFound
from gpuplane_hypervisor.domain.allocations import AllocationState
from gpuplane_hypervisor.domain.cost import QosPrice, node_row, worker_raw_cost, worker_rows
from gpuplane_hypervisor.domain.gpu_models import max_tflops
from gpuplane_hypervisor.domain.line_protocol import Row, encode
from gpuplane_hypervisor.domain.models import (
    AllocationEvent,
    DeviceInfo,
    DeviceSample,
    EventType,
    ProcessSample,
    Registration,
    Resources,
)
from gpuplane_hypervisor.domain.procfs import (
    ProcCandidate,
    choose_host_pid,
    in_pod_cgroup,
    parse_nspid,
    parse_start_ticks,
)
from gpuplane_hypervisor.domain.simulated_spec import parse_simulated_devices
from gpuplane_hypervisor.domain.workers import (
    MountConfig,
    compute_cap,
    injected_envs,
    limiter_entry,
    pod_info,
    snapshot_candidates,
    worker_json,
    worker_usage,
)


def dev(uuid: str, model: str = "H100", tflops: float = 989.0, index: int = 0) -> DeviceInfo:
    return DeviceInfo(uuid, "NVIDIA", model, index, 0, 80 * GIB, tflops, True)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA L4", 121.0),
        ("Tesla T4", 65.0),
        ("NVIDIA A10G", 70.0),
        ("Mystery Accelerator 9000", 0.0),
    ],
)
def test_max_tflops_comes_from_the_model_table(name: str, expected: float) -> None:
    assert max_tflops(name) == expected


def test_simulated_spec_parses_groups_and_rejects_garbage() -> None:
    groups = parse_simulated_devices("4xH100-80GB, 2xL4-24GB")
    assert [(g.count, g.model, g.memory_bytes) for g in groups] == [
        (4, "H100", 80 * GIB),
        (2, "L4", 24 * GIB),
    ]
    for bad in ("H100", "4xH100", "0xH100-80GB", "4xH100-0GB", "99999xH100-80GB"):
        with pytest.raises(ValueError):
            parse_simulated_devices(bad)


def test_full_listing_is_staged_until_synced_so_old_state_is_served_meanwhile() -> None:
    state = AllocationState()
    a, b = allocation("a", ["g0"]), allocation("b", ["g1"])
    state.apply(AllocationEvent(EventType.RESET, 1))
    state.apply(AllocationEvent(EventType.ADDED, 1, a))
    assert state.allocations == {}  # not visible before SYNCED
    assert state.apply(AllocationEvent(EventType.SYNCED, 1)) is True
    assert set(state.allocations) == {"a"} and state.synced
    # A relist after a reconnect: "a" keeps being served until the new listing is complete.
    state.apply(AllocationEvent(EventType.RESET, 5))
    state.apply(AllocationEvent(EventType.ADDED, 5, b))
    assert set(state.allocations) == {"a"}
    state.apply(AllocationEvent(EventType.SYNCED, 5))
    assert set(state.allocations) == {"b"}
    assert state.revision == 5
    # A listing cut off before SYNCED neither shows nor advances the resume revision.
    state.apply(AllocationEvent(EventType.RESET, 9))
    state.apply(AllocationEvent(EventType.ADDED, 9, a))
    assert state.begin_stream() == 5 and set(state.allocations) == {"b"}
    state.apply(AllocationEvent(EventType.SYNCED, 5))
    assert set(state.allocations) == {"b"}
    # Live events after SYNCED apply directly.
    assert state.apply(AllocationEvent(EventType.DELETED, 6, b)) is True
    assert state.allocations == {} and state.revision == 6


def test_compute_cap_formula_and_clamp() -> None:
    assert compute_cap(100.0, 989.0) == math.ceil(100 / 989 * 100) == 11
    assert compute_cap(0.001, 989.0) == 1
    assert compute_cap(5000.0, 989.0) == 100
    assert compute_cap(10.0, 0.0) == 100  # unknown model: no throttling rather than a division by zero


def test_worker_shape_envs_and_limiter_views() -> None:
    devices = {"g0": dev("g0"), "g1": dev("g1", index=1)}
    a = allocation("uid-1", ["g0", "g1"], tflops_request=100.0, tflops_limit=200.0, qos="low")
    envs = injected_envs(a, devices)
    assert envs["NVIDIA_VISIBLE_DEVICES"] == "g0,g1"
    assert envs["TENSOR_FUSION_COMPUTE_LIMIT"] == "21,21"  # ceil(200/989*100)
    assert envs["TENSOR_FUSION_VRAM_LIMIT"] == str(16 * GIB)
    body = worker_json(a, devices, [], MountConfig("/host/shm"))
    assert body["WorkerUID"] == "uid-1" and body["AllocatedDevices"] == ["g0", "g1"]
    assert body["Status"] == "Allocated"
    assert body["Mounts"][0]["HostPath"] == "/host/shm/ns/pod-uid-1"
    info = pod_info(a, devices)
    assert info == {
        "pod_name": "pod-uid-1",
        "namespace": "ns",
        "gpu_uuids": ["g0", "g1"],
        "tflops_limit": 200.0,
        "vram_limit": 16 * GIB,
        "qos_level": "low",
        "compute_shard": True,
        "isolation": "soft",
    }
    entry = limiter_entry(a, devices)
    assert entry["limits"]["compute_percent"] == 21 and entry["requests"]["tflops"] == 100.0


def test_missing_limit_falls_back_on_request_and_percent_limits_convert() -> None:
    devices = {"g0": dev("g0")}
    a = allocation("u", ["g0"], tflops_limit=None, vram_limit=None)
    assert pod_info(a, devices)["tflops_limit"] == 100.0
    assert pod_info(a, devices)["vram_limit"] == 8 * GIB
    pct = allocation("p", ["g0"], tflops_request=None, tflops_limit=None)
    pct = pct.__class__(**{**pct.__dict__, "limit": Resources(compute_percent=50.0)})
    assert pod_info(pct, devices)["tflops_limit"] == pytest.approx(494.5)
    assert injected_envs(pct, devices)["TENSOR_FUSION_COMPUTE_LIMIT"] == "50"


def test_trap_counts_low_and_medium_workers_on_the_device() -> None:
    allocs = [
        allocation("a", ["g0"], qos="low"),
        allocation("b", ["g0"], qos="medium"),
        allocation("c", ["g0"], qos="high"),
        allocation("d", ["g1"], qos="low"),
    ]
    assert snapshot_candidates(allocs, "g0") == 2
    assert snapshot_candidates(allocs, None) == 3


def test_worker_usage_only_counts_the_pods_registered_processes() -> None:
    a = allocation("u", ["g0"])
    regs = [Registration(10, 1, "main", "u", "p", "ns", 5), Registration(11, 1, "x", "other", "q", "ns", 5)]
    samples = {"g0": DeviceSample("g0", 0, 0.0, (ProcessSample(10, GIB, 20.0), ProcessSample(11, GIB, 5.0)))}
    usage = worker_usage(a, regs, samples)
    assert usage == {"g0": {"10": ProcessSample(10, GIB, 20.0)}}


def test_raw_cost_formula() -> None:
    price = QosPrice(tflops_per_hour=3.6, vram_gib_per_hour=7.2, limits_over_requests=0.5)
    a = allocation(
        "u", ["g0", "g1"], tflops_request=10.0, tflops_limit=20.0, vram_request=GIB, vram_limit=3 * GIB
    )
    # per second: 10*0.001 + 1*0.002 + 10*0.001*0.5 + 2*0.002*0.5 = 0.019; x 60 s x 2 GPUs
    assert worker_raw_cost(a, price, 60.0) == pytest.approx(0.019 * 60 * 2)


def test_line_protocol_rows_escape_and_type_fields() -> None:
    row = Row("tf_worker_resources", {"worker": "a b,c", "pool": ""}, {"x": 1.5, "n": 2, "ready": True}, 7)
    assert encode(row) == r"tf_worker_resources,worker=a\ b\,c x=1.5,n=2i,ready=true 7"
    tiny = Row("m", {}, {"cost": 2.7e-06, "big": 1e22, "bad": float("nan"), "whole": 3.0}, 1)
    assert encode(tiny) == "m cost=0.0000027,big=10000000000000000000000,whole=3.0 1"
    a = allocation("u", ["g0"], pool="p1", workload="w")
    (w,) = worker_rows([a], {}, 10.0, {"u": True}, 1)
    assert w.tags == {"worker": a.pod_name, "workload": "w", "pool": "p1", "namespace": "ns", "qos": "medium"}
    assert set(w.fields) == {
        "tflops_request",
        "tflops_limit",
        "vram_bytes_request",
        "vram_bytes_limit",
        "gpu_count",
        "raw_cost",
        "ready",
    }
    n = node_row("n", "p1", [dev("g0")], [a], 3600.0, 2.0, 1)
    assert n.fields["raw_cost"] == pytest.approx(2.0)
    assert n.fields["allocated_tflops"] == 100.0 and n.fields["gpu_count"] == 1


def test_procfs_parsing() -> None:
    assert parse_nspid("Name:\tsleep\nNSpid:\t4242\t7\t2\n") == (4242, 7, 2)
    assert parse_nspid("Name:\tx\n") is None
    stat = "123 (we ird) name) S " + " ".join(str(i) for i in range(4, 30))
    assert parse_start_ticks(stat) == 22
    uid = "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
    assert in_pod_cgroup(f"0::/kubepods/burstable/pod{uid}/abc\n", uid)
    assert in_pod_cgroup(f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/x\n", uid)
    assert not in_pod_cgroup("0::/kubepods/burstable/podffff/abc\n", uid)


def test_choose_host_pid_needs_the_pods_cgroup_and_an_unambiguous_match() -> None:
    uid = "u-1"
    mine = ProcCandidate(100, (100, 1), "8:pids:/k/podu-1/c\n", 1)
    other = ProcCandidate(200, (200, 1), "8:pids:/k/podu-2/c\n", 1)
    assert choose_host_pid([mine, other], 1, uid, check_cgroup=True) is mine
    with pytest.raises(NotFound):
        choose_host_pid([other], 1, uid, check_cgroup=True)
    with pytest.raises(Conflict):
        choose_host_pid([mine, other], 1, uid, check_cgroup=False)
    assert choose_host_pid([other], 1, uid, check_cgroup=False) is other
