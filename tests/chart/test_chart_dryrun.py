"""Server-side dry-run apply of the rendered chart into the devcluster: the real API server
validates every object (schemas, CRDs, RBAC references) and persists nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from chart_apply import Applier
from chart_kit import CI_VALUES, Helm
from kubernetes_asyncio.client.exceptions import ApiException


async def _dry_run_all(api: Any, docs: list[dict[str, Any]], namespace: str) -> list[str]:
    applier = Applier(api)
    failures: list[str] = []
    for obj in docs:
        try:
            out = await applier.apply(obj, namespace, dry_run=True)
        except ApiException as e:
            failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {e.status} {e.body}")
            continue
        assert out["kind"] == obj["kind"]
    return failures


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=["default", *(p.stem for p in CI_VALUES)])
async def test_dry_run_apply(helm: Helm, kube_api: Any, namespace: str, values: Path | None) -> None:
    docs = helm.render(*([values] if values else []), namespace=namespace, include_crds=True)
    assert len(docs) > 20
    failures = await _dry_run_all(kube_api, docs, namespace)
    assert not failures, "\n".join(failures)


async def test_dry_run_persists_nothing(helm: Helm, kube_api: Any, namespace: str) -> None:
    from kubernetes_asyncio import client

    docs = helm.render(namespace=namespace)
    assert not await _dry_run_all(kube_api, docs, namespace)
    apps = client.AppsV1Api(kube_api)
    assert not (await apps.list_namespaced_deployment(namespace)).items
    assert not (await apps.list_namespaced_daemon_set(namespace)).items


async def test_api_server_rejects_a_broken_object(helm: Helm, kube_api: Any, namespace: str) -> None:
    # The dry run is a real check: the same path refuses what the API server would refuse.
    docs = helm.render(namespace=namespace)
    dep = json.loads(json.dumps(next(d for d in docs if d["kind"] == "Deployment")))
    dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = 70000
    with pytest.raises(ApiException) as err:
        await Applier(kube_api).apply(dep, namespace, dry_run=True)
    assert err.value.status == 422
    assert "containerPort" in err.value.body
