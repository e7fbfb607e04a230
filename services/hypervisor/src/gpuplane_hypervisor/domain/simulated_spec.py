"""Parse the simulated inventory spec, e.g. ``"4xH100-80GB"`` or ``"2xA100-40GB,1xL4-24GB"``."""

from __future__ import annotations

import re
from dataclasses import dataclass

_GROUP_RE = re.compile(
    r"^(?P<count>[0-9]{1,4})x(?P<model>[A-Za-z0-9][A-Za-z0-9 _.-]*?)-(?P<mem>[0-9]{1,5})GB?$"
)
MAX_SIMULATED_DEVICES = 1024


@dataclass(frozen=True)
class SimulatedGroup:
    count: int
    model: str
    memory_bytes: int


def parse_simulated_devices(spec: str) -> list[SimulatedGroup]:
    """Groups of ``<count>x<model>-<GiB>GB``, comma-separated; memory in GiB as NVML reports it.

    Raises ValueError on a malformed spec.
    """
    groups: list[SimulatedGroup] = []
    if not spec.strip():
        return groups
    for part in spec.split(","):
        match = _GROUP_RE.match(part.strip())
        if match is None:
            raise ValueError(f"{part.strip()[:40]!r} is not <count>x<model>-<GiB>GB, e.g. 4xH100-80GB")
        count, mem = int(match["count"]), int(match["mem"])
        if count < 1 or mem < 1:
            raise ValueError("count and memory must be positive")
        groups.append(SimulatedGroup(count, match["model"].replace("_", " "), mem * 1024**3))
    if sum(g.count for g in groups) > MAX_SIMULATED_DEVICES:
        raise ValueError(f"at most {MAX_SIMULATED_DEVICES} devices")
    return groups
