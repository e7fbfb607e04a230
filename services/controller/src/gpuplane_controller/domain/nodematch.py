"""Standard pod-to-node constraints the scheduler must not break: nodeSelector,
required node affinity, taints/tolerations and node readiness. Also the
NodeSelector matcher GPUPools use to pick their nodes. Works on plain dicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    ready: bool = True
    unschedulable: bool = False


def _expr_ok(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            a, b = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def selector_terms_match(terms: list[dict[str, Any]], node: NodeInfo) -> bool:
    """NodeSelector semantics: terms are ORed, expressions within a term ANDed."""
    for term in terms:
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches nothing
        if all(_expr_ok(e, node.labels) for e in exprs) and all(
            _expr_ok(f, {"metadata.name": node.name}) for f in fields
        ):
            return True
    return False


def _tolerates(tolerations: list[dict[str, Any]], key: str, value: str, effect: str) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != effect:
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t["key"] != key:
            continue
        if op == "Exists" or (t.get("value") or "") == value:
            return True
    return False


def pod_fits_node(spec: dict[str, Any], node: NodeInfo) -> bool:
    """Whether a pod with this (camelCase) spec may run on `node`."""
    if not node.ready or node.unschedulable:
        return False
    for k, v in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(k) != v:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms and not selector_terms_match(terms, node):
        return False
    tolerations = spec.get("tolerations") or []
    for key, value, effect in node.taints:
        if effect in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, key, value, effect):
            return False
    return True
