"""Pure logic of pools, nodes, labels and quotas (no cluster)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from gpuplane_core.errors import Forbidden, InvalidSpec
from gpuplane_gpuctl.domain.inventory import (
    Gpu,
    add_shared,
    filter_nodes,
    gpu_detail,
    labels_overview,
    node_item,
    node_row,
    pod_use,
    pool_views,
    usage_by_node,
)
from gpuplane_gpuctl.domain.labels import check_changeable, is_protected, validate_key, validate_value
from gpuplane_gpuctl.domain.quota import QuotaState, check_quota, job_demand, parse_quota, resource_quota
from gpuplane_gpuctl.domain.spec import parse_spec
from gpuplane_gpuctl.domain.yaml_load import load_document


def node(
    name: str, gpus: int = 8, model: str = "A100", pool: str | None = None, ready: bool = True
) -> dict[str, Any]:
    labels = {"runwhere.ai/gpu-type": model, "nvidia.com/gpu.memory": "81920"}
    if pool:
        labels["runwhere.ai/pool"] = pool
    res = {"cpu": "96", "memory": "1024Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "capacity": res,
            "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(name: str, node_name: str | None, gpu: int, phase: str = "Running", cpu: str = "1") -> dict[str, Any]:
    limits = {"cpu": cpu, "memory": "1Gi", **({"nvidia.com/gpu": str(gpu)} if gpu else {})}
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"nodeName": node_name, "containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": phase},
    }


def test_pool_of_two_nodes_with_three_gpus_requested() -> None:
    nodes = [node_row(node("a", pool="p")), node_row(node("b", pool="p")), node_row(node("c"))]
    uses = [pod_use(pod("x", "a", 2)), pod_use(pod("y", "b", 1)), pod_use(pod("z", "c", 4))]
    usage = usage_by_node(u for u in uses if u)
    (p,) = pool_views(nodes, usage)
    assert (p["gpuTotal"], p["gpuUsed"], p["gpuFree"]) == (16, 3, 13)
    assert p["gpuType"] == ["A100"] and p["nodes"] == ["a", "b"] and p["status"] == "active"


def test_pending_pods_bound_for_a_pool_count_as_used_there() -> None:
    nodes = [node_row(node("a", pool="p")), node_row(node("b", pool="q", gpus=2))]
    waiting = pod("w", None, 3, phase="Pending")
    waiting["metadata"]["labels"] = {"runwhere.ai/pool": "p"}
    big = pod("big", None, 5, phase="Pending")
    big["metadata"]["labels"] = {"runwhere.ai/pool": "q"}
    stray = pod("stray", None, 4, phase="Pending")  # no pool: counts nowhere
    uses = [u for u in map(pod_use, [waiting, big, stray]) if u]
    p, q = pool_views(nodes, usage_by_node(uses), pending=uses)
    assert (p["gpuTotal"], p["gpuUsed"], p["gpuFree"]) == (8, 3, 5)
    assert (q["gpuTotal"], q["gpuUsed"], q["gpuFree"]) == (2, 5, 0)  # over-asked: free never negative


def test_finished_and_unbound_pods_use_nothing() -> None:
    assert pod_use(pod("done", "a", 2, phase="Succeeded")) is None
    assert pod_use(pod("failed", "a", 2, phase="Failed")) is None
    pending = pod_use(pod("pending", None, 2, phase="Pending"))
    assert pending is not None and usage_by_node([pending]) == {}


def test_requests_win_over_limits_and_init_containers_take_the_max() -> None:
    p = pod("x", "a", 1)
    p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "500m"}
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]
    u = pod_use(p)
    assert u is not None and u.cpu_milli == 2000 and u.gpu == 1 and u.memory == 1 << 30


def test_node_item_reports_real_cpu_memory_and_status() -> None:
    n = node_row(node("a", ready=False))
    u = usage_by_node([u for u in [pod_use(pod("x", "a", 3, cpu="1500m"))] if u])
    item = node_item(n, u["a"])
    assert item["status"] == "NotReady" and (item["gpuUsed"], item["gpuFree"]) == (3, 5)
    assert item["cpu"] == {"capacity": "96", "allocatable": "96", "requested": "1500m"}
    assert item["memory"]["requested"] == "1Gi" and item["memory"]["capacity"] == "1024Gi"


def test_pool_status_degraded_and_filters() -> None:
    nodes = [node_row(node("a", pool="p")), node_row(node("b", pool="p", ready=False, model="H100"))]
    (p,) = pool_views(nodes, {})
    assert p["status"] == "degraded" and p["gpuType"] == ["A100", "H100"]
    assert [n.name for n in filter_nodes(nodes, "p", "H100", None)] == ["b"]
    assert [n.name for n in filter_nodes(nodes, None, None, "notready")] == ["b"]
    assert filter_nodes(nodes, "other", None, None) == []


def test_gpu_detail_from_requests_and_from_controller() -> None:
    nodes = [node_row(node("a", gpus=4)), node_row(node("b", gpus=2))]
    usage = usage_by_node([u for u in [pod_use(pod("x", "a", 2))] if u])
    controller = [
        Gpu("b-0", "b", "A100", "80Gi", "312", "156", "80Gi", ["ns/frac"]),
        Gpu("b-1", "b", "A100", "80Gi", "312", "312", "80Gi", []),
    ]
    add_shared(usage, controller)
    a, b = gpu_detail(nodes, usage, controller)
    assert a["source"] == "requests" and [g["allocated"] for g in a["gpus"]] == [1.0, 1.0, 0.0, 0.0]
    assert a["gpus"][0]["pods"] == ["ns/x"] and a["gpus"][0]["memory"] == "81920Mi"
    assert b["source"] == "controller" and [g["allocated"] for g in b["gpus"]] == [0.5, 0.0]
    assert b["gpus"][0]["pods"] == ["ns/frac"]
    assert node_item(nodes[1], usage["b"])["gpuUsed"] == 1  # one GPU holds a fractional worker


def test_labels_overview_groups_values() -> None:
    nodes = [node_row(node("a", model="A100")), node_row(node("b", model="H100"))]
    assert labels_overview(nodes)["runwhere.ai/gpu-type"] == ["A100", "H100"]


@pytest.mark.parametrize(
    "key", ["team", "example.com/team", "a.b-c/x_y.z", "runwhere.ai/pool", "x" * 63, "a" * 253 + "/n"]
)
def test_valid_label_keys(key: str) -> None:
    assert validate_key(key) == key


@pytest.mark.parametrize(
    "key", ["", "-x", "x-", "UPPER.com/x", "a/b/c", "/x", "x" * 64, "a" * 254 + "/n", "bad key", "ok/"]
)
def test_invalid_label_keys(key: str) -> None:
    with pytest.raises(InvalidSpec):
        validate_key(key)


def test_label_values() -> None:
    assert validate_value("") == "" and validate_value("A100_v2.1") == "A100_v2.1"
    for v in ("-x", "x y", "v" * 64, "a/b"):
        with pytest.raises(InvalidSpec):
            validate_value(v)


def test_protected_system_labels() -> None:
    for k in ("kubernetes.io/hostname", "node-role.kubernetes.io/worker", "node.k8s.io/x", "k8s.io/y"):
        assert is_protected(k)
        with pytest.raises(Forbidden):
            check_changeable(k)
    for k in ("mykubernetes.io/x", "team", "runwhere.ai/pool"):
        assert not is_protected(k)


QUOTA = """
kind: quota
version: v0.1
quota: {name: team-quota, description: d}
namespace:
  team-alice: {cpu: 16, memory: 64Gi, gpu: 4}
default: {cpu: 8, memory: 32Gi, gpu: 1}
"""


def test_quota_document_to_resource_quotas() -> None:
    spec = parse_quota(load_document(QUOTA))
    targets = spec.targets()
    assert sorted(targets) == ["default", "team-alice"]
    rq = resource_quota(spec, "team-alice", targets["team-alice"])
    assert rq["metadata"]["name"] == "team-quota-team-alice"
    assert rq["metadata"]["labels"] == {
        "runwhere.ai/quota": "team-quota",
        "runwhere.ai/namespace": "team-alice",
    }
    assert rq["spec"]["hard"] == {"cpu": "16", "memory": "64Gi", "requests.nvidia.com/gpu": "4"}


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (QUOTA.replace("gpu: 4}", "gpu: 4, typo: 1}"), "namespace.team-alice.typo"),
        (QUOTA.replace("gpu: 4}", "gpu: '4'}"), "namespace.team-alice.gpu"),
        (QUOTA.replace("memory: 64Gi", "memory: lots"), "namespace.team-alice.memory"),
        (QUOTA.replace("team-alice", "kube-system"), "namespace"),
        (QUOTA.replace("name: team-quota", "name: Team"), "quota.name"),
        (QUOTA.replace("{cpu: 8, memory: 32Gi, gpu: 1}", "{}"), "default"),
        (QUOTA + "extra: 1\n", "extra"),
    ],
)
def test_quota_document_errors_name_the_field(doc: str, field: str) -> None:
    with pytest.raises(InvalidSpec) as e:
        parse_quota(load_document(doc))
    assert e.value.field == field, e.value.message


def job(gpu: int, replicas: int = 1, cpu: str = "1") -> Any:
    kind = "inference" if replicas > 1 else "training"
    svc = {"service": {"port": 80, "replicas": replicas}} if replicas > 1 else {}
    return parse_spec({
        "kind": kind, "version": "v0.1", "job": {"name": "j"}, "environment": {"image": "x"},
        "resources": {"cpu": cpu, "memory": "1Gi", "gpu": gpu}, **svc,
    })  # fmt: skip


def test_job_demand_counts_replicas() -> None:
    d = job_demand(job(2, replicas=3))
    assert d == {"cpu": Decimal(3), "memory": Decimal(3 << 30), "gpu": Decimal(6), "pods": Decimal(3)}


def test_check_quota_names_the_exceeded_resource() -> None:
    q = QuotaState(
        "tq-a", {"cpu": "4", "requests.nvidia.com/gpu": "2"}, {"cpu": "1", "requests.nvidia.com/gpu": "1"}
    )
    check_quota("a", job_demand(job(1)), [q])  # 1 + 1 <= 2
    with pytest.raises(Forbidden) as e:
        check_quota("a", job_demand(job(2)), [q])
    assert e.value.field == "resources.gpu" and "requests.nvidia.com/gpu" in e.value.message
    assert e.value.code == "quota_exceeded"
    with pytest.raises(Forbidden) as e:
        check_quota("a", job_demand(job(0, cpu="4")), [q])
    assert e.value.field == "resources.cpu"
    # a quota without status.used yet counts as nothing used; unknown keys are left to the apiserver
    check_quota(
        "a", job_demand(job(2)), [QuotaState("x", {"requests.nvidia.com/gpu": "2", "services": "0"}, {})]
    )
