"""Pure allocator tests: annotation parsing, filter stages, scoring strategies, quota."""

from __future__ import annotations

import random

import pytest

from gpuplane_controller.domain.allocator import Allocator
from gpuplane_controller.domain.filters import STAGES
from gpuplane_controller.domain.model import Gpu, PoolConfig, Quota
from gpuplane_controller.domain.nodematch import NodeInfo, pod_fits_node
from gpuplane_controller.domain.podrequest import parse_request
from gpuplane_core.errors import InvalidSpec

GI = 2**30


def pod(ann: dict[str, str], uid: str = "u1", ns: str = "ns") -> dict:
    full = {f"tensor-fusion.ai/{k}": v for k, v in ann.items()}
    return {"metadata": {"name": f"p-{uid}", "namespace": ns, "uid": uid, "annotations": full}, "spec": {}}


def req(ann: dict[str, str], uid: str = "u1", ns: str = "ns"):
    return parse_request(pod({"gpupool": "pool", **ann}, uid, ns), lambda: "pool")


def cluster(
    nodes: int = 2, gpus: int = 4, strategy: str = "NodeCompactGPULowLoad", oversell: int = 100
) -> Allocator:
    a = Allocator()
    a.set_pool(PoolConfig("pool", strategy=strategy, oversell_percent=oversell))
    for n in range(nodes):
        for i in range(gpus):
            a.upsert_gpu(
                Gpu(
                    f"n{n}-g{i}",
                    f"node-{n}",
                    "pool",
                    model="H100",
                    vendor="NVIDIA",
                    index=i,
                    capacity_tflops_m=100_000,
                    capacity_vram=80 * GI,
                )
            )
    return a


# ---- parsing ----------------------------------------------------------------------------------
def test_missing_request_copied_from_limit_and_qos_high_when_equal() -> None:
    r = req({"tflops-limit": "20", "vram-limit": "4Gi"})
    assert (r.request.tflops_m, r.request.vram) == (20_000, 4 * GI)
    assert r.qos == "high" and r.isolation == "soft" and r.gpu_count == 1


def test_qos_defaults_medium_when_request_below_limit() -> None:
    r = req({"tflops-request": "10", "tflops-limit": "20", "vram-request": "1Gi"})
    assert r.qos == "medium" and r.limit.vram == GI


@pytest.mark.parametrize(
    ("ann", "field"),
    [
        ({"tflops-request": "ten", "vram-request": "1Gi"}, "tensor-fusion.ai/tflops-request"),
        ({"tflops-request": "1", "vram-request": "1Gi", "qos": "urgent"}, "tensor-fusion.ai/qos"),
        ({"tflops-request": "1", "vram-request": "1Gi", "isolation": "x"}, "tensor-fusion.ai/isolation"),
        ({"tflops-request": "1", "vram-request": "1Gi", "gpu-count": "0"}, "tensor-fusion.ai/gpu-count"),
        (
            {"tflops-request": "1", "compute-percent-request": "10"},
            "tensor-fusion.ai/compute-percent-request",
        ),
        (
            {"tflops-request": "5", "tflops-limit": "1", "vram-request": "1Gi"},
            "tensor-fusion.ai/tflops-request",
        ),
        ({}, "tensor-fusion.ai/tflops-request"),
        (
            {"tflops-request": "1", "vram-request": "1Gi", "gpu-indices": "a,b"},
            "tensor-fusion.ai/gpu-indices",
        ),
        (
            {"tflops-request": "1", "vram-request": "1Gi", "dedicated-gpu": "maybe"},
            "tensor-fusion.ai/dedicated-gpu",
        ),
    ],
)
def test_bad_annotations_name_the_field(ann: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidSpec) as e:
        req(ann)
    assert e.value.field == field


# ---- filters and scoring ------------------------------------------------------------------------
def test_stage_order_and_resource_filter_names_the_failure() -> None:
    a = cluster()
    d = a.schedule(req({"tflops-request": "500", "vram-request": "1Gi"}), diagnose=True)
    assert [s.name for s in d.stages] == list(STAGES)
    assert not d.ok and d.failed_filter == "GPUResourceFilter"
    assert "GPUResourceFilter" in d.error and "pool pool" in d.error
    assert {n.plugin for n in d.diagnosis.values()} == {"GPUResourceFilter"}
    res = d.stages[STAGES.index("GPUResourceFilter")]
    assert res.diff == 8 and res.after == []


def test_unknown_pool_has_no_devices() -> None:
    d = cluster().schedule(
        parse_request(pod({"gpupool": "nope", "tflops-request": "1", "vram-request": "1"}), str)
    )
    assert d.error == "no gpu devices in pool nope"


def test_compact_first_stacks_on_one_gpu() -> None:
    a = cluster(strategy="CompactFirst")
    placed = []
    for i in range(3):
        r = req({"tflops-request": "10", "vram-request": "8Gi"}, uid=f"u{i}")
        d = a.schedule(r)
        a.reserve(r, d.node, d.gpus)
        placed.append(d.gpus[0])
    assert placed == ["n0-g0", "n0-g0", "n0-g0"]


def test_low_load_first_spreads() -> None:
    a = cluster(strategy="LowLoadFirst")
    placed = []
    for i in range(3):
        r = req({"tflops-request": "10", "vram-request": "8Gi"}, uid=f"u{i}")
        d = a.schedule(r)
        a.reserve(r, d.node, d.gpus)
        placed.append(d.gpus[0])
    assert len(set(placed)) == 3


def test_node_compact_gpu_low_load_fills_one_node_across_its_gpus() -> None:
    a = cluster()
    placed = []
    for i in range(4):
        r = req({"tflops-request": "10", "vram-request": "8Gi"}, uid=f"u{i}")
        d = a.schedule(r)
        a.reserve(r, d.node, d.gpus)
        placed.append((d.node, d.gpus[0]))
    assert {n for n, _ in placed} == {"node-0"}
    assert len({g for _, g in placed}) == 4


def test_two_pods_share_a_gpu_when_they_fit_and_release_frees_it() -> None:
    a = cluster(nodes=1, gpus=1)
    r1, r2, r3 = (req({"tflops-request": "40", "vram-request": "30Gi"}, uid=u) for u in ("a", "b", "c"))
    for r in (r1, r2):
        d = a.schedule(r)
        assert d.gpus == ["n0-g0"]
        a.reserve(r, d.node, d.gpus)
    assert not a.schedule(r3).ok
    a.release("a")
    assert a.schedule(r3).gpus == ["n0-g0"]
    assert a.gpus["n0-g0"].available_vram == 50 * GI


def test_multi_gpu_on_one_node() -> None:
    a = cluster(nodes=2, gpus=2)
    big = req({"tflops-request": "60", "vram-request": "10Gi"}, uid="x")
    d = a.schedule(big)
    a.reserve(big, d.node, d.gpus)  # one GPU of node-0 is now mostly used
    r = req({"tflops-request": "50", "vram-request": "10Gi", "gpu-count": "2"}, uid="y")
    d = a.schedule(r)
    assert d.node == "node-1" and sorted(d.gpus) == ["n1-g0", "n1-g1"]
    r3 = req({"tflops-request": "50", "vram-request": "10Gi", "gpu-count": "3"}, uid="z")
    d3 = a.schedule(r3, diagnose=True)
    assert d3.failed_filter == "SameNodeFilter"


def test_oversell_ratio_allows_more_tflops() -> None:
    a = cluster(nodes=1, gpus=1, oversell=300)
    r = req({"tflops-request": "250", "vram-request": "1Gi"})
    assert a.schedule(r).gpus == ["n0-g0"]


def test_quota_checked_first() -> None:
    a = cluster()
    a.set_quota(Quota("ns", total_tflops_m=30_000))
    r1 = req({"tflops-request": "20", "vram-request": "1Gi"}, uid="a")
    d = a.schedule(r1)
    a.reserve(r1, d.node, d.gpus)
    d2 = a.schedule(req({"tflops-request": "20", "vram-request": "1Gi"}, uid="b"), diagnose=True)
    assert not d2.ok and d2.failed_filter == "GPUResourceQuota" and "total.requests.tflops" in d2.error
    assert a.schedule(req({"tflops-request": "20", "vram-request": "1Gi"}, uid="c", ns="other")).ok


def test_model_vendor_index_filters() -> None:
    a = cluster()
    assert (
        a.schedule(
            req({"tflops-request": "1", "vram-request": "1", "gpu-model": "A100"}), diagnose=True
        ).failed_filter
        == "GPUModelFilter"
    )
    d = a.schedule(req({"tflops-request": "1", "vram-request": "1", "gpu-indices": "3"}))
    assert a.gpus[d.gpus[0]].index == 3


def test_node_constraints_exclude_nodes() -> None:
    a = cluster()
    d = a.schedule(req({"tflops-request": "1", "vram-request": "1"}), lambda n: n == "node-1")
    assert d.node == "node-1"
    d = a.schedule(req({"tflops-request": "1", "vram-request": "1"}), lambda n: False, diagnose=True)
    assert d.failed_filter == "NodeAffinityFilter"


def test_taints_selector_and_readiness() -> None:
    node = NodeInfo("n", {"zone": "a"}, (("nvidia.com/gpu", "present", "NoSchedule"),))
    tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert not pod_fits_node({}, node)
    assert pod_fits_node({"tolerations": tol}, node)
    assert not pod_fits_node({"tolerations": tol, "nodeSelector": {"zone": "b"}}, node)
    assert not pod_fits_node({"tolerations": tol}, NodeInfo("n", ready=False))
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    assert pod_fits_node({"tolerations": tol, "affinity": aff}, node)


@pytest.mark.parametrize("seed", [7, 11])
@pytest.mark.parametrize("strategy", ["CompactFirst", "LowLoadFirst", "NodeCompactGPULowLoad"])
def test_fast_path_agrees_with_diagnosed_path(strategy: str, seed: int) -> None:
    """The indexed fast path must pick exactly what the full diagnosed chain picks."""
    rnd = random.Random(seed)
    a = cluster(nodes=6, gpus=4, strategy=strategy)
    for i in range(150):
        ann = {"vram-request": f"{rnd.randint(1, 40)}Gi", "gpu-count": str(rnd.choice([1, 1, 1, 2, 3]))}
        if rnd.random() < 0.2:
            ann["compute-percent-request"] = str(rnd.randint(5, 60))
        else:
            ann["tflops-request"] = str(rnd.randint(1, 60))
        r = req(ann, uid=f"u{i}")
        excluded = rnd.choice(["node-1", "node-4", ""])
        fast = a.schedule(r, excluded.__ne__)
        slow = a.schedule(r, excluded.__ne__, diagnose=True)
        assert (fast.node, fast.gpus) == (slow.node, slow.gpus)
        if fast.ok:
            a.reserve(r, fast.node, fast.gpus)
        if i % 5 == 0 and a.allocations:
            a.release(rnd.choice(sorted(a.allocations)))
    for g in a.gpus.values():
        assert g.available_tflops_m >= 0 and g.available_vram >= 0


def test_reserve_is_idempotent_by_pod_uid() -> None:
    a = cluster(nodes=1, gpus=1)
    r = req({"tflops-request": "10", "vram-request": "1Gi"})
    a.reserve(r, "node-0", ["n0-g0"])
    a.reserve(r, "node-0", ["n0-g0"])
    assert a.gpus["n0-g0"].used_tflops_m == 10_000


def test_isolation_mode_support() -> None:
    a = cluster(nodes=1, gpus=2)
    a.gpus["n0-g0"].isolation_mode = "soft"
    a.gpus["n0-g1"].isolation_mode = "hard"
    hard = a.schedule(req({"tflops-request": "1", "vram-request": "1", "isolation": "hard"}), diagnose=True)
    assert hard.gpus == ["n0-g1"]
    iso = next(s for s in hard.stages if s.name == "GPUIsolationModeFilter")
    assert iso.diff == 1
    part = a.schedule(
        req({"tflops-request": "1", "vram-request": "1", "isolation": "partitioned"}), diagnose=True
    )
    assert part.failed_filter == "GPUIsolationModeFilter"


def test_pool_membership_and_default_pool() -> None:
    from gpuplane_controller.state import ClusterState

    st = ClusterState()
    st.upsert_node(
        {"metadata": {"name": "a", "labels": {"runwhere.ai/pool": "team"}}, "spec": {}, "status": {}}
    )
    st.upsert_node({"metadata": {"name": "b", "labels": {"zone": "z1"}}, "spec": {}, "status": {}})
    for node in ("a", "b"):
        st.upsert_gpu_object(
            {
                "metadata": {"name": f"{node}-g0"},
                "status": {
                    "phase": "Running",
                    "capacity": {"tflops": "100", "vram": "80Gi"},
                    "nodeSelector": {"kubernetes.io/hostname": node},
                },
            }
        )
    assert st.allocator.gpus["a-g0"].pool == "team" and st.allocator.gpus["b-g0"].pool == ""
    assert st.default_pool() == ""
    st.upsert_pool(
        {
            "metadata": {"name": "sel"},
            "spec": {
                "nodeManagerConfig": {
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}
                        ]
                    }
                }
            },
        }
    )
    assert st.allocator.gpus["b-g0"].pool == "sel"
    with pytest.raises(InvalidSpec):
        st.default_pool()
