"""Which namespaces deleting a cluster may remove (pure rules from the API contract)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
MANAGED_BY_LABEL = ("app.kubernetes.io/managed-by", "llm-d-lens")
# Objects Kubernetes and common add-ons put in every namespace; they do not keep a namespace alive.
INJECTED_CONFIGMAPS = frozenset({"kube-root-ca.crt", "openshift-service-ca.crt", "istio-ca-root-cert"})


def storage_namespace(cluster_id: str) -> str:
    return f"llm-d-bench-storage-{cluster_id}"


def injected(kind: str, obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    if kind == "ServiceAccount":
        return name == "default"
    if kind == "ConfigMap":
        return name in INJECTED_CONFIGMAPS
    if kind == "Secret":
        annotations = meta.get("annotations") or {}
        return (
            obj.get("type") == "kubernetes.io/service-account-token"
            and annotations.get("kubernetes.io/service-account.name") == "default"
        )
    return False


def may_delete_namespace(
    namespace: str,
    cluster_id: str,
    labels: Mapping[str, str],
    created_by_lens: bool,
    remaining: Iterable[tuple[str, Mapping[str, Any]]] | None,
) -> bool:
    """True when the HF secret's namespace has no reason to outlive the cluster.

    ``remaining`` is every object left in it as (kind, object), or None when it could not be
    listed — then the namespace is kept.
    """
    if namespace in PROTECTED_NAMESPACES or namespace.startswith("kube-"):
        return False
    if namespace == storage_namespace(cluster_id) or created_by_lens:
        return True
    if labels.get(MANAGED_BY_LABEL[0]) == MANAGED_BY_LABEL[1]:
        return True
    if remaining is None:
        return False
    return all(injected(kind, obj) for kind, obj in remaining)
