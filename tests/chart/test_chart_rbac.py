"""Least-privilege RBAC: each service's ClusterRole/Role grants exactly the API calls its
k8s/ adapters make, no wildcards; a call added to a service without a grant fails here."""

from __future__ import annotations

import re
from typing import Any

import pytest
from chart_kit import ROOT, Helm, find

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)

CLUSTER: dict[str, set[Grant]] = {
    "controller": {
        *{("", r, v) for r in ("nodes", "pods") for v in ("get", "list", "watch")},
        ("", "pods/binding", "create"),
        ("", "pods/status", "patch"),
        ("", "events", "create"),
        ("", "events", "patch"),
        *{
            ("tensor-fusion.ai", r, v)
            for r in ("gpupools", "schedulingconfigtemplates", "gpuresourcequotas")
            for v in ("get", "list", "watch")
        },
        *{
            ("tensor-fusion.ai", r, v)
            for r in ("gpus", "gpunodes")
            for v in ("get", "list", "watch", "create", "patch")
        },
        ("tensor-fusion.ai", "gpus/status", "patch"),
        ("tensor-fusion.ai", "gpunodes/status", "patch"),
        *{("tensor-fusion.ai", "tensorfusionconnections", v) for v in ("get", "list", "watch")},
        ("tensor-fusion.ai", "tensorfusionconnections/status", "patch"),
        ("authentication.k8s.io", "tokenreviews", "create"),
    },
    "hypervisor": {("authentication.k8s.io", "tokenreviews", "create")},
    "gpuctl": {
        *{("", "namespaces", v) for v in ("get", "list", "create", "patch", "delete")},
        *{("", "nodes", v) for v in ("get", "list", "watch", "patch")},
        *{("", "pods", v) for v in ("get", "list", "watch", "deletecollection")},
        ("", "pods/log", "get"),
        ("", "events", "list"),
        *{("", "resourcequotas", v) for v in ("list", "create", "delete")},
        *{("", "services", v) for v in ("get", "create", "delete")},
        *{("apps", r, v) for r in ("deployments", "statefulsets") for v in ("list", "create", "delete")},
        *{("batch", "jobs", v) for v in ("list", "create", "delete")},
        ("scheduling.k8s.io", "priorityclasses", "create"),
    },
    "lens": set(),  # Lens acts only through the kubeconfigs registered with it
}

NAMESPACED: dict[str, set[Grant]] = {
    "controller": {
        *{
            ("coordination.k8s.io", "leases", v)
            for v in ("get", "list", "watch", "create", "update", "patch")
        },
        *{("", "configmaps", v) for v in ("get", "list", "watch", "create", "patch")},
    },
}

# kubernetes_asyncio method stem -> (apiGroup, resource)
_RESOURCES: dict[str, tuple[str, str]] = {
    "node": ("", "nodes"),
    "pod": ("", "pods"),
    "pod_status": ("", "pods/status"),
    "pod_log": ("", "pods/log"),
    "binding": ("", "pods/binding"),
    "namespace": ("", "namespaces"),
    "event": ("", "events"),
    "resource_quota": ("", "resourcequotas"),
    "service": ("", "services"),
    "config_map": ("", "configmaps"),
    "deployment": ("apps", "deployments"),
    "stateful_set": ("apps", "statefulsets"),
    "job": ("batch", "jobs"),
    "priority_class": ("scheduling.k8s.io", "priorityclasses"),
    "lease": ("coordination.k8s.io", "leases"),
    "token_review": ("authentication.k8s.io", "tokenreviews"),
}
_VERBS = {
    "list": "list",
    "read": "get",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete": "delete",
    "delete_collection": "deletecollection",
}
_CALL = re.compile(
    r"\.(delete_collection|list|read|create|patch|replace|delete)_(?:namespaced_)?([a-z_]+?)(?:_for_all_namespaces)?\b"
)


def _used(component: str) -> set[Grant]:
    """API calls the service's k8s adapters make (typed clients; custom objects are listed above)."""
    src = ROOT / "services" / component / "src" / f"gpuplane_{component}"
    used: set[Grant] = set()
    for path in src.rglob("*.py"):
        for verb, stem in _CALL.findall(path.read_text()):
            if stem in _RESOURCES:
                used.add((*_RESOURCES[stem], _VERBS[verb]))
    if "KubeTokenReviewer" in "".join(p.read_text() for p in src.rglob("*.py")):
        used.add(("authentication.k8s.io", "tokenreviews", "create"))
    return used


def _grants(docs: list[dict[str, Any]], kind: str, component: str) -> set[Grant]:
    out: set[Grant] = set()
    for role in find(docs, kind, component):
        for rule in role["rules"]:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        out.add((g, r, v))
    return out


@pytest.mark.parametrize("component", sorted(CLUSTER))
def test_cluster_role_is_exact(helm: Helm, component: str) -> None:
    docs = helm.render()
    assert _grants(docs, "ClusterRole", component) == CLUSTER[component]
    assert _grants(docs, "Role", component) == NAMESPACED.get(component, set())


@pytest.mark.parametrize("component", sorted(CLUSTER))
def test_every_call_is_granted(helm: Helm, component: str) -> None:
    docs = helm.render()
    granted = _grants(docs, "ClusterRole", component) | _grants(docs, "Role", component)
    missing = _used(component) - granted
    assert not missing, f"{component} calls the API without a grant in the chart: {sorted(missing)}"


def test_no_wildcards_and_bindings_point_at_own_sa(helm: Helm) -> None:
    docs = helm.render()
    for role in find(docs, "ClusterRole") + find(docs, "Role"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], role["metadata"]["name"]
    for b in find(docs, "ClusterRoleBinding") + find(docs, "RoleBinding"):
        (subject,) = b["subjects"]
        assert subject["name"] == b["roleRef"]["name"]  # each service is bound to its own role only
        assert subject["namespace"] == "gpuplane-system"


def test_lens_has_no_token(helm: Helm) -> None:
    docs = helm.render()
    (sa,) = [d for d in find(docs, "ServiceAccount", "lens")]
    assert sa["automountServiceAccountToken"] is False
    assert not find(docs, "ClusterRoleBinding", "lens") and not find(docs, "RoleBinding", "lens")


def test_auto_expander_adds_only_gpunodeclaims(helm: Helm) -> None:
    docs = helm.render(sets=("controller.autoExpander.enabled=true",))
    added = _grants(docs, "ClusterRole", "controller") - CLUSTER["controller"]
    assert added == {
        ("tensor-fusion.ai", "gpunodeclaims", "get"),
        ("tensor-fusion.ai", "gpunodeclaims", "list"),
        ("tensor-fusion.ai", "gpunodeclaims", "create"),
        ("tensor-fusion.ai", "gpunodeclaims/status", "patch"),
    }
