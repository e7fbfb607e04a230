"""Job and quota documents: the shared bounded YAML loader with gpuctl's tighter limits.

A job spec is small and shallow, so the limits are well below the platform default; they are
checked while composing (gpuplane_core.yaml_limits), before anything is constructed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuplane_core import yaml_limits
from gpuplane_core.errors import InvalidSpec
from gpuplane_core.yaml_limits import load_bounded


@dataclass(frozen=True)
class YamlLimits(yaml_limits.YamlLimits):
    max_bytes: int = 256 * 1024
    max_depth: int = 32
    max_aliases: int = 32
    max_nodes: int = 20_000


DEFAULT_LIMITS = YamlLimits()


def load_document(
    text: str, limits: YamlLimits = DEFAULT_LIMITS, field: str = "yamlContent"
) -> dict[str, Any]:
    """Parse one YAML (or JSON) document that must be a mapping, within `limits`."""
    data = load_bounded(text, field=field, limits=limits)
    if data is None:
        raise InvalidSpec("YAML document is empty", field=field)
    if not isinstance(data, dict):
        raise InvalidSpec("YAML document must be a mapping with kind, version, job, ...", field=field)
    return data
