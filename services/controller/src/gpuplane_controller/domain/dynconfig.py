"""The controller's dynamic config: what `GET /api/config` shows and what a ConfigMap or file
hot-reloads. Validation is strict (unknown keys rejected) so a typo never silently does nothing."""

from __future__ import annotations

import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from gpuplane_core.errors import InvalidSpec

_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w))+$")


def _duration(value: str) -> str:
    if not _DURATION.match(value):
        raise ValueError("must be a duration such as 30s, 5m, 1h30m, 7d")
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class SchedulerConfig(_Model):
    """Cluster-wide scoring defaults (a SchedulingConfigTemplate's own weights win for its pools)."""

    vram_weight: float = Field(default=0.7, ge=0, le=1)
    tflops_weight: float = Field(default=0.3, ge=0, le=1)
    max_worker_per_node: int = Field(default=256, ge=1)


class AlertRule(_Model):
    name: str = Field(min_length=1)
    query: str = Field(min_length=1)
    threshold: float
    evaluation_interval: str = "1m"
    consecutive_count: int = Field(default=1, ge=1)
    severity: Literal["P0", "P1", "P2", "P3"] = "P1"
    summary: str = ""
    description: str = ""

    _interval = field_validator("evaluation_interval")(_duration)


class DynamicConfig(_Model):
    metrics_ttl: str = Field(default="30d", alias="metricsTTL")
    metrics_format: Literal["influx", "json", "otel"] = "influx"
    alert_rules: list[AlertRule] = Field(default_factory=list)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)

    _ttl = field_validator("metrics_ttl")(_duration)

    @field_validator("alert_rules")
    @classmethod
    def _unique_names(cls, rules: list[AlertRule]) -> list[AlertRule]:
        seen: set[str] = set()
        for r in rules:
            if r.name in seen:
                raise ValueError(f"alert rule name {r.name!r} is used twice")
            seen.add(r.name)
        return rules

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def parse_config(text: str | bytes) -> DynamicConfig:
    """YAML (or JSON) text to a validated config; InvalidSpec names the offending field."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InvalidSpec(f"dynamic config is not valid YAML: {e}", field="config") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidSpec("dynamic config must be a mapping", field="config")
    try:
        return DynamicConfig.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "config"
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise InvalidSpec(f"dynamic config: {where}: {msg}", field=where) from None
