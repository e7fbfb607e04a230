"""GPU hardware profiles, kept as data, and how a node's GPUs are counted from them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuplane_lens.domain.quantities import parse_count, parse_memory_bytes


@dataclass(frozen=True)
class GpuProfile:
    """How one accelerator family shows up on a node.

    ``resources`` are extended-resource names whose capacity is a device count;
    ``dra_drivers`` are ResourceSlice drivers whose devices are GPUs of this family.
    VRAM comes from a per-device label in MiB (GPU feature discovery) or a resource
    holding the node's total device memory.
    """

    id: str
    resources: tuple[str, ...]
    dra_drivers: tuple[str, ...]
    vram_label_mib: str | None = None
    vram_resource: str | None = None


GPU_PROFILES: tuple[GpuProfile, ...] = (
    GpuProfile(
        id="nvidia",
        resources=("nvidia.com/gpu",),
        dra_drivers=("gpu.nvidia.com",),
        vram_label_mib="nvidia.com/gpu.memory",
    ),
    GpuProfile(
        id="intel-xpu",
        resources=("gpu.intel.com/i915", "gpu.intel.com/xe"),
        dra_drivers=("gpu.intel.com",),
        vram_resource="gpu.intel.com/memory.max",
    ),
    GpuProfile(
        id="amd",
        resources=("amd.com/gpu",),
        dra_drivers=("gpu.amd.com",),
    ),
)


def _profile_for_resource(name: str, profiles: Iterable[GpuProfile]) -> GpuProfile | None:
    return next((p for p in profiles if name in p.resources), None)


def dra_devices_by_node(
    slices: Iterable[Mapping[str, Any]], profiles: Iterable[GpuProfile] = GPU_PROFILES
) -> dict[str, dict[str, int]]:
    """{node: {profile: devices}} from ResourceSlices (node-local slices only)."""
    by_driver = {d: p.id for p in profiles for d in p.dra_drivers}
    out: dict[str, dict[str, int]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        node = spec.get("nodeName")
        profile = by_driver.get(str(spec.get("driver", "")))
        if not node or profile is None:
            continue
        counts = out.setdefault(node, {})
        counts[profile] = counts.get(profile, 0) + len(spec.get("devices") or [])
    return out


def gpus_by_profile(
    node: Mapping[str, Any],
    dra: Mapping[str, int] | None = None,
    profiles: Iterable[GpuProfile] = GPU_PROFILES,
) -> dict[str, int]:
    """Device count per profile from capacity and DRA; a device seen both ways counts once."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    counts: dict[str, int] = {}
    profiles = tuple(profiles)
    for resource, quantity in capacity.items():
        profile = _profile_for_resource(resource, profiles)
        if profile is None:
            continue
        n = parse_count(quantity)
        if n > 0:
            counts[profile.id] = counts.get(profile.id, 0) + n
    for profile_id, n in (dra or {}).items():
        if n > 0:
            counts[profile_id] = max(counts.get(profile_id, 0), n)
    return counts


def vram_bytes(
    node: Mapping[str, Any], counts: Mapping[str, int], profiles: Iterable[GpuProfile] = GPU_PROFILES
) -> int:
    labels = (node.get("metadata") or {}).get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    total = 0
    for profile in profiles:
        n = counts.get(profile.id, 0)
        if n <= 0:
            continue
        if profile.vram_label_mib and str(labels.get(profile.vram_label_mib, "")).isdigit():
            total += int(labels[profile.vram_label_mib]) * 1024 * 1024 * n
        elif profile.vram_resource and profile.vram_resource in capacity:
            total += parse_memory_bytes(capacity[profile.vram_resource])
    return total


def gpu_requests(pod: Mapping[str, Any], profiles: Iterable[GpuProfile] = GPU_PROFILES) -> int:
    """GPUs a pod holds: the larger of its containers' sum and its biggest init container."""
    spec = pod.get("spec") or {}
    names = {r for p in profiles for r in p.resources}

    def count(container: Mapping[str, Any]) -> int:
        res = container.get("resources") or {}
        asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return sum(parse_count(v) for k, v in asked.items() if k in names)

    main = sum(count(c) for c in spec.get("containers") or [])
    init = max((count(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)
