"""Quota documents (kind: quota, version v0.1) and the quota check a job must pass.

```yaml
kind: quota
version: v0.1
quota: {name: team-quota, description: ...}
namespace:
  team-alice: {cpu: 16, memory: 64Gi, gpu: 4}
default: {cpu: 8, memory: 32Gi, gpu: 1}   # the `default` namespace's quota
```

Each namespace gets a ResourceQuota `<quota>-<namespace>` labelled
`runwhere.ai/quota=<quota>` and `runwhere.ai/namespace=<namespace>` with hard
limits `cpu`, `memory` and `requests.nvidia.com/gpu` (only those given).
Parsed with the same strict, bounded loader as job documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from gpuplane_core.errors import Forbidden, InvalidSpec
from gpuplane_core.quantity import format_quantity, parse_quantity
from gpuplane_gpuctl.domain.spec import JobSpec, _dns_label, _quantity, _Strict, validate_document

L_QUOTA = "runwhere.ai/quota"
L_NAMESPACE = "runwhere.ai/namespace"
A_QUOTA_DESCRIPTION = "runwhere.ai/description"
GPU_QUOTA_KEY = "requests.nvidia.com/gpu"
# ResourceQuota keys -> the job resource they limit.
_QUOTA_KEYS = {
    "cpu": "cpu", "requests.cpu": "cpu", "limits.cpu": "cpu",
    "memory": "memory", "requests.memory": "memory", "limits.memory": "memory",
    "requests.nvidia.com/gpu": "gpu", "limits.nvidia.com/gpu": "gpu", "nvidia.com/gpu": "gpu",
    "pods": "pods", "count/pods": "pods",
}  # fmt: skip


class QuotaLimits(_Strict):
    cpu: str | int | float | None = None
    memory: str | None = None
    gpu: Annotated[int, Field(ge=0, le=100_000)] | None = None

    @field_validator("cpu", "memory", mode="before")
    @classmethod
    def _qty(cls, v: Any) -> Any:
        return None if v is None else _quantity(v)

    @model_validator(mode="after")
    def _something(self) -> QuotaLimits:
        if self.cpu is None and self.memory is None and self.gpu is None:
            raise ValueError("give at least one of cpu, memory, gpu")
        return self

    def hard(self) -> dict[str, str]:
        out = {}
        if self.cpu is not None:
            out["cpu"] = str(self.cpu)
        if self.memory is not None:
            out["memory"] = self.memory
        if self.gpu is not None:
            out[GPU_QUOTA_KEY] = str(self.gpu)
        return out


class QuotaMeta(_Strict):
    name: str
    description: Annotated[str, Field(max_length=1024)] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        # <name>-<namespace> must still be a valid object name, so keep the quota name short.
        if len(v) > 63:
            raise ValueError("quota name must be at most 63 characters")
        return _dns_label(v, "quota name")


class QuotaSpec(_Strict):
    kind: Literal["quota"]
    version: Literal["v0.1"]
    quota: QuotaMeta
    namespace: dict[str, QuotaLimits] = Field(default_factory=dict)
    default: QuotaLimits | None = None

    @field_validator("namespace")
    @classmethod
    def _namespaces(cls, v: dict[str, QuotaLimits]) -> dict[str, QuotaLimits]:
        for ns in v:
            _dns_label(ns, f"namespace {ns!r}")
            if ns.startswith("kube-"):
                raise ValueError(f"namespace {ns}: kube-* namespaces cannot be given a gpuctl quota")
        return v

    @model_validator(mode="after")
    def _any(self) -> QuotaSpec:
        if not self.namespace and self.default is None:
            raise ValueError("give quotas under namespace and/or default")
        if "default" in self.namespace and self.default is not None:
            raise ValueError("the default namespace is given twice (namespace.default and default)")
        return self

    def targets(self) -> dict[str, QuotaLimits]:
        """Namespace -> limits, `default:` meaning the `default` namespace."""
        out = dict(self.namespace)
        if self.default is not None:
            out["default"] = self.default
        return out


def parse_quota(data: dict[str, Any]) -> QuotaSpec:
    return validate_document(QuotaSpec, data)


def quota_name(quota: str, namespace: str) -> str:
    name = f"{quota}-{namespace}"
    if len(name) > 253:
        raise InvalidSpec(f"quota object name {name} is longer than 253 characters", field="quota.name")
    return name


def resource_quota(spec: QuotaSpec, namespace: str, limits: QuotaLimits) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": quota_name(spec.quota.name, namespace),
        "namespace": namespace,
        "labels": {L_QUOTA: spec.quota.name, L_NAMESPACE: namespace},
    }
    if spec.quota.description:
        meta["annotations"] = {A_QUOTA_DESCRIPTION: spec.quota.description}
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta, "spec": {"hard": limits.hard()}}


def _q(v: Any) -> Decimal:
    return parse_quantity(str(v)) if v not in (None, "") else Decimal(0)


def job_demand(spec: JobSpec) -> dict[str, Decimal]:
    """What a job's pods request in total, as quotas count it (requests equal limits)."""
    n = Decimal(spec.replicas if spec.kind in ("inference", "compute") else 1)
    r = spec.resources
    return {"cpu": _q(r.cpu) * n, "memory": _q(r.memory) * n, "gpu": Decimal(r.gpu) * n, "pods": n}


@dataclass(frozen=True)
class QuotaState:
    name: str
    hard: dict[str, str]
    used: dict[str, str]


def check_quota(namespace: str, demand: dict[str, Decimal], quotas: list[QuotaState]) -> None:
    """403 (code quota_exceeded) naming the first resource the job would push over its hard limit."""
    for q in quotas:
        for key, hard in sorted(q.hard.items()):
            what = _QUOTA_KEYS.get(key)
            if what is None or not demand.get(what):
                continue
            used, want, limit = _q(q.used.get(key)), demand[what], _q(hard)
            if used + want > limit:
                field = {"cpu": "resources.cpu", "memory": "resources.memory", "gpu": "resources.gpu"}.get(
                    what, "service.replicas"
                )
                raise Forbidden(
                    f"exceeded quota {q.name} in namespace {namespace}: {key} requested "
                    f"{format_quantity(want, binary=what == 'memory')}, "
                    f"used {q.used.get(key, '0')}, limited to {hard}",
                    field=field,
                    code="quota_exceeded",
                    details={"resource": key, "quota": q.name},
                )
