"""The CRDs in charts/gpuplane/crds against a real kube-apiserver (the devcluster installs them).

Checks that every CRD is Established and served as written, that each sample in charts/gpuplane/crd-samples
round-trips without losing a field, that each sample in crd-samples/invalid is refused with the status and
field named in its `# expect-*` header, and that the status subresource separates spec from status.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from crd_files import (
    CRD_FILES,
    CRDS,
    GROUP,
    INVALID_SAMPLES,
    SAMPLE_DIR,
    VALID_SAMPLES,
    VERSION,
    expectations,
    load,
)
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

pytestmark = pytest.mark.cluster


# merge patch; the generated stubs do not declare `_content_type`, so it is passed as **MERGE_PATCH.
MERGE_PATCH: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _is_subset(expected: Any, actual: Any) -> bool:
    """Everything in `expected` is in `actual` (dicts may carry more keys, e.g. apiserver defaults)."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            k in actual and _is_subset(v, actual[k]) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(_is_subset(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return bool(expected == actual) and type(expected) is type(actual)


def _error(exc: ApiException) -> dict[str, Any]:
    body = exc.body.decode() if isinstance(exc.body, bytes) else exc.body
    parsed: dict[str, Any] = json.loads(body or "{}")
    return parsed


class Objects:
    """Scope-aware access to tensor-fusion.ai objects; removes the cluster-scoped ones it created."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.created: list[tuple[str, str]] = []

    @staticmethod
    def plural(kind: str) -> str:
        plural: str = CRDS[kind]["spec"]["names"]["plural"]
        return plural

    @staticmethod
    def namespaced(kind: str) -> bool:
        return bool(CRDS[kind]["spec"]["scope"] == "Namespaced")

    def prepare(self, sample: dict[str, Any]) -> dict[str, Any]:
        """A copy of the sample, renamed per test if cluster-scoped (those outlive the test's namespace)."""
        obj = copy.deepcopy(sample)
        if not self.namespaced(obj["kind"]):
            obj["metadata"]["name"] = f"{obj['metadata']['name']}-{self.namespace}"[:253].rstrip("-.")
        return obj

    async def create(self, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        kind = body["kind"]
        if self.namespaced(kind):
            out = await self.api.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, self.plural(kind), body, **kwargs
            )
        else:
            out = await self.api.create_cluster_custom_object(
                GROUP, VERSION, self.plural(kind), body, **kwargs
            )
            self.created.append((kind, body["metadata"]["name"]))
        assert isinstance(out, dict)
        return out

    async def get(self, kind: str, name: str) -> dict[str, Any]:
        if self.namespaced(kind):
            out = await self.api.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, self.plural(kind), name
            )
        else:
            out = await self.api.get_cluster_custom_object(GROUP, VERSION, self.plural(kind), name)
        assert isinstance(out, dict)
        return out

    async def patch(self, kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.namespaced(kind):
            out = await self.api.patch_namespaced_custom_object(
                GROUP, VERSION, self.namespace, self.plural(kind), name, body, **MERGE_PATCH
            )
        else:
            out = await self.api.patch_cluster_custom_object(
                GROUP, VERSION, self.plural(kind), name, body, **MERGE_PATCH
            )
        assert isinstance(out, dict)
        return out

    async def patch_status(self, kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.namespaced(kind):
            out = await self.api.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, self.plural(kind), name, body, **MERGE_PATCH
            )
        else:
            out = await self.api.patch_cluster_custom_object_status(
                GROUP, VERSION, self.plural(kind), name, body, **MERGE_PATCH
            )
        assert isinstance(out, dict)
        return out

    async def cleanup(self) -> None:
        for kind, name in reversed(self.created):
            try:
                await self.api.delete_cluster_custom_object(GROUP, VERSION, self.plural(kind), name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


@pytest.fixture
async def objects(kube_api: client.ApiClient, namespace: str) -> AsyncIterator[Objects]:
    objs = Objects(kube_api, namespace)
    try:
        yield objs
    finally:
        await objs.cleanup()


# ---------------------------------------------------------------- the CRDs themselves


@pytest.mark.parametrize("path", CRD_FILES, ids=lambda p: p.stem)
async def test_crd_is_established_as_written(kube_api: client.ApiClient, path: Path) -> None:
    want = load(path)
    name = want["metadata"]["name"]
    ext = client.ApiextensionsV1Api(kube_api)
    conditions: dict[str, str] = {}
    for _ in range(60):
        crd = await ext.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in (crd.status.conditions or [])}
        if conditions.get("Established") == "True":
            break
        await asyncio.sleep(0.5)
    assert conditions.get("Established") == "True", conditions
    assert conditions.get("NamesAccepted") == "True", conditions
    assert conditions.get("NonStructuralSchema") != "True", conditions
    assert crd.spec.group == GROUP
    assert crd.spec.scope == want["spec"]["scope"]
    assert [(v.name, v.served, v.storage) for v in crd.spec.versions] == [(VERSION, True, True)]
    assert crd.status.accepted_names.kind == want["spec"]["names"]["kind"]

    # The installed CRD is the file, not a stale copy: compare the raw objects.
    raw = await client.CustomObjectsApi(kube_api).get_cluster_custom_object(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", name
    )
    assert _is_subset(want["spec"], raw["spec"]), f"installed {name} differs from {path.name}"


async def test_discovery_lists_every_kind(kube_api: client.ApiClient) -> None:
    resources = await client.CustomObjectsApi(kube_api).get_api_resources(GROUP, VERSION)
    served = {r.name: r for r in resources.resources}
    for kind, crd in CRDS.items():
        names = crd["spec"]["names"]
        res = served[names["plural"]]
        assert res.kind == kind
        assert res.namespaced == (crd["spec"]["scope"] == "Namespaced")
        assert sorted(res.short_names or []) == sorted(names.get("shortNames", []))
        assert res.categories == ["tensor-fusion"]
        assert f"{names['plural']}/status" in served, f"{kind} has no status subresource"


# ---------------------------------------------------------------- valid samples


@pytest.mark.parametrize("path", VALID_SAMPLES, ids=lambda p: p.stem)
async def test_valid_sample_round_trips(objects: Objects, path: Path) -> None:
    sample = objects.prepare(load(path))
    kind, name = sample["kind"], sample["metadata"]["name"]

    created = await objects.create(sample)  # status included on purpose: the subresource must drop it
    assert created["metadata"]["generation"] == 1
    assert not created.get("status"), "status must only be writable through the status subresource"

    got = await objects.get(kind, name)
    assert _is_subset(sample.get("spec", {}), got.get("spec", {})), "spec lost or changed fields"
    assert _is_subset(sample["metadata"].get("labels", {}), got["metadata"].get("labels", {}))

    patched = await objects.patch_status(kind, name, {"status": sample["status"]})
    assert _is_subset(sample["status"], patched["status"]), "status lost or changed fields"

    after = await objects.get(kind, name)
    assert after["status"] == patched["status"]
    assert after.get("spec") == got.get("spec"), "a status write changed spec"
    assert after["metadata"]["generation"] == 1, "a status write bumped the generation"


# ---------------------------------------------------------------- invalid samples


@pytest.mark.parametrize("path", INVALID_SAMPLES, ids=lambda p: p.stem)
async def test_invalid_sample_is_rejected(objects: Objects, path: Path) -> None:
    expect = expectations(path)
    sample = objects.prepare(load(path))
    kwargs = {"field_validation": expect["field-validation"]} if "field-validation" in expect else {}

    with pytest.raises(ApiException) as caught:
        await objects.create(sample, **kwargs)

    assert caught.value.status == int(expect["expect-status"]), caught.value.body
    body = _error(caught.value)
    assert expect["expect-field"] in body.get("message", ""), body
    if caught.value.status == 422:
        assert body["reason"] == "Invalid"
        causes = [c.get("field") for c in body.get("details", {}).get("causes", [])]
        assert expect["expect-field"] in causes, causes

    with pytest.raises(ApiException) as missing:
        await objects.get(sample["kind"], sample["metadata"]["name"])
    assert missing.value.status == 404


@pytest.mark.parametrize(
    "path",
    [p for p in INVALID_SAMPLES if expectations(p).get("field-validation") == "Strict"],
    ids=lambda p: p.stem,
)
async def test_unknown_fields_are_pruned_when_not_strict(objects: Objects, path: Path) -> None:
    """Without fieldValidation=Strict the apiserver accepts the object but drops what the schema lacks."""
    sample = objects.prepare(load(path))
    created = await objects.create(sample, field_validation="Warn")
    node: Any = created
    *parents, leaf = expectations(path)["expect-field"].split(".")
    for step in parents:
        node = node.get(step, {})
    assert leaf not in node


# ---------------------------------------------------------------- the status subresource


async def test_status_and_spec_are_written_separately(objects: Objects) -> None:
    sample = objects.prepare(load(SAMPLE_DIR / "gpunode.yaml"))
    kind, name = sample["kind"], sample["metadata"]["name"]
    await objects.create(sample)
    await objects.patch_status(kind, name, {"status": sample["status"]})

    # Through the status subresource a spec change is ignored ...
    out = await objects.patch_status(
        kind, name, {"spec": {"costPerHour": "99.99"}, "status": {"phase": "Migrating"}}
    )
    assert out["spec"] == sample["spec"]
    assert out["status"]["phase"] == "Migrating"
    assert out["status"]["totalGPUs"] == sample["status"]["totalGPUs"], "merge patch dropped status fields"
    assert out["metadata"]["generation"] == 1

    # ... and through the main resource a status change is ignored.
    out = await objects.patch(kind, name, {"spec": {"costPerHour": "99.99"}, "status": {"phase": "Failed"}})
    assert out["spec"]["costPerHour"] == "99.99"
    assert out["status"]["phase"] == "Migrating"
    assert out["metadata"]["generation"] == 2


@pytest.mark.parametrize(
    ("status", "field"),
    [
        ({"phase": "Exploded"}, "status.phase"),
        ({"capacity": {"vram": "eighty gigs"}}, "status.capacity.vram"),
        ({"isolationMode": "strict"}, "status.isolationMode"),
        ({"index": -1}, "status.index"),
    ],
)
async def test_invalid_status_is_rejected(objects: Objects, status: dict[str, Any], field: str) -> None:
    sample = objects.prepare(load(SAMPLE_DIR / "gpu.yaml"))
    await objects.create(sample)
    with pytest.raises(ApiException) as caught:
        await objects.patch_status(sample["kind"], sample["metadata"]["name"], {"status": status})
    assert caught.value.status == 422
    assert field in _error(caught.value)["message"]


async def test_quantities_accept_integers_and_strings(objects: Objects) -> None:
    sample = objects.prepare(load(SAMPLE_DIR / "tensorfusionworkload.yaml"))
    sample["spec"]["resources"] = {
        "requests": {"tflops": 100, "vram": "16Gi"},
        "limits": {"tflops": "200.5", "vram": 17179869184},
    }
    created = await objects.create(sample)
    assert created["spec"]["resources"] == sample["spec"]["resources"]


# ---------------------------------------------------------------- printer columns


@pytest.mark.parametrize("sample_file", ["gpu.yaml", "gpunode.yaml", "gpupool.yaml"])
async def test_printer_columns_render(kube_api: client.ApiClient, objects: Objects, sample_file: str) -> None:
    sample = objects.prepare(load(SAMPLE_DIR / sample_file))
    kind, name = sample["kind"], sample["metadata"]["name"]
    await objects.create(sample)
    await objects.patch_status(kind, name, {"status": sample["status"]})

    table = await kube_api.call_api(
        f"/apis/{GROUP}/{VERSION}/{Objects.plural(kind)}/{name}",
        "GET",
        header_params={"Accept": TABLE},
        response_types_map={200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    (version,) = CRDS[kind]["spec"]["versions"]
    want = ["Name"] + [c["name"] for c in version["additionalPrinterColumns"]]
    assert [c["name"] for c in table["columnDefinitions"]] == want
    (row,) = table["rows"]
    cells = dict(zip(want, row["cells"], strict=True))
    assert cells["Name"] == name
    assert cells["Phase"] == sample["status"]["phase"]
    if kind == "GPU":
        assert cells["Node"] == sample["status"]["nodeSelector"]["kubernetes.io/hostname"]
        assert cells["Model"] == sample["status"]["model"]
        assert cells["VRAM Available"] == sample["status"]["available"]["vram"]
    if kind == "GPUNode":
        assert cells["GPUs"] == sample["status"]["totalGPUs"]
        assert cells["Total VRAM"] == sample["status"]["totalVRAM"]
    if kind == "GPUPool":
        assert cells["Nodes"] == sample["status"]["totalNodes"]
