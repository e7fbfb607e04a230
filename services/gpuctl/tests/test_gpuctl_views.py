"""Pure views: list rows, statuses, ages, paging and the fractional 'could ever fit' check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpuplane_gpuctl.admission import could_ever_fit
from gpuplane_gpuctl.domain.spec import GpuShare
from gpuplane_gpuctl.domain.views import format_age, pod_row, pod_status, workload_status
from gpuplane_gpuctl.grpc.capacity import GpuCapacity
from gpuplane_gpuctl.queries import list_page

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def pod(name: str, phase: str = "Running", kind: str = "training", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "creationTimestamp": (NOW - timedelta(minutes=5)).isoformat(),
            "labels": {"runwhere.ai/job-type": kind, "runwhere.ai/job-name": name.rsplit("-", 1)[0]},
        },
        "spec": {"containers": [{"name": "main"}], "nodeName": "n1"},
        "status": {"phase": phase, "podIP": "10.0.0.1", **status},
    }


def test_age_format() -> None:
    assert [format_age(NOW - timedelta(seconds=s), NOW) for s in (5, 300, 3 * 3600, 3 * 86400)] == [
        "5s",
        "5m",
        "3h",
        "3d",
    ]
    assert format_age(None, NOW) == ""


def test_pod_status_like_kubectl() -> None:
    assert pod_status(pod("a-1", "Succeeded")) == "Completed"
    waiting = {"containerStatuses": [{"ready": False, "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}
    assert pod_status(pod("a-1", "Pending", **waiting)) == "ImagePullBackOff"
    gone = pod("a-1")
    gone["metadata"]["deletionTimestamp"] = NOW.isoformat()
    assert pod_status(gone) == "Terminating"


def test_list_page_is_consistent_and_filtered() -> None:
    rows = [pod_row(pod(f"job{i % 3}-{i}", "Running" if i % 2 else "Succeeded")) for i in range(25)]
    pages = [
        list_page(rows, kind=None, pool=None, status=None, namespace=None, page=p, page_size=10)
        for p in (1, 2, 3)
    ]
    assert [p["total"] for p in pages] == [25, 25, 25]
    assert sum(len(p["items"]) for p in pages) == 25
    done = list_page(
        rows, kind="training", pool=None, status="completed", namespace=None, page=1, page_size=100
    )
    assert done["total"] == 13 and {i["status"] for i in done["items"]} == {"Completed"}
    assert (
        list_page(rows, kind="notebook", pool=None, status=None, namespace=None, page=1, page_size=5)["total"]
        == 0
    )
    item = pages[0]["items"][0]
    assert item["age"] and item["ready"] == "0/1" and item["node"] == "n1"


def test_job_workload_status() -> None:
    job = {"kind": "Job", "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert workload_status(job, []) == "Completed"
    job = {"kind": "Job", "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    assert workload_status(job, []) == "Failed"
    dep = {"kind": "Deployment", "spec": {"replicas": 2}, "status": {"readyReplicas": 1}}
    assert workload_status(dep, [pod("d-1", "Pending")]) == "Pending"
    assert workload_status(dep, [pod("d-1")]) == "Running"


def test_could_ever_fit() -> None:
    gpus = [GpuCapacity(f"g{i}", f"n{i // 2}", "H100", "p", "100", "80Gi") for i in range(4)]
    assert could_ever_fit(GpuShare(tflops="90", vram="80Gi"), gpus, None)
    assert not could_ever_fit(GpuShare(tflops="101", vram="1Gi"), gpus, None)
    assert not could_ever_fit(GpuShare(tflops="10", vram="81Gi"), gpus, None)
    assert could_ever_fit(GpuShare(tflops="10", vram="1Gi", count=2), gpus, None)
    assert not could_ever_fit(GpuShare(tflops="10", vram="1Gi", count=3), gpus, None)  # 2 per node
    assert not could_ever_fit(GpuShare(tflops="10", vram="1Gi"), gpus, "A100")
    assert could_ever_fit(GpuShare(percent=50), gpus, None)
