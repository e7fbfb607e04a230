"""Pod annotations `tensor-fusion.ai/*` -> the allocator's request, with the reference's
defaulting rules. Bad values raise InvalidSpec naming the annotation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplane_controller.domain.model import ISOLATION_MODES, QOS_LEVELS, AllocRequest, Amount, PodRef
from gpuplane_core.errors import InvalidSpec
from gpuplane_core.quantity import parse_non_negative_quantity, to_bytes, to_milli

PREFIX = "tensor-fusion.ai/"
GPU_IDS = PREFIX + "gpu-ids"
INDEX = PREFIX + "index"
SCHEDULER_NAME = "tensor-fusion-scheduler"
MAX_GPU_COUNT = 64


def _quantity(ann: dict[str, str], key: str, conv: Callable[[str], int]) -> int:
    raw = ann.get(PREFIX + key)
    if raw is None or raw == "":
        return 0
    try:
        parse_non_negative_quantity(raw)
        return conv(raw)
    except InvalidSpec as e:
        raise InvalidSpec(f"annotation {PREFIX}{key}: {e.message}", field=PREFIX + key) from e


def _bool(ann: dict[str, str], key: str) -> bool:
    raw = ann.get(PREFIX + key, "").strip().lower()
    if raw in ("", "false"):
        return False
    if raw == "true":
        return True
    raise InvalidSpec(
        f"annotation {PREFIX}{key}: expected true or false, got {raw[:40]!r}", field=PREFIX + key
    )


def _choice(ann: dict[str, str], key: str, choices: tuple[str, ...], default: str) -> str:
    raw = ann.get(PREFIX + key, "").strip().lower()
    if not raw:
        return default
    if raw not in choices:
        raise InvalidSpec(
            f"annotation {PREFIX}{key}: must be one of {', '.join(choices)}, got {raw[:40]!r}",
            field=PREFIX + key,
        )
    return raw


def _int(ann: dict[str, str], key: str, default: int, lo: int, hi: int) -> int:
    raw = ann.get(PREFIX + key, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not lo <= int(raw) <= hi:
        raise InvalidSpec(
            f"annotation {PREFIX}{key}: must be an integer from {lo} to {hi}", field=PREFIX + key
        )
    return int(raw)


def _percent_m(raw_key: str, ann: dict[str, str]) -> int:
    value = _quantity(ann, raw_key, to_milli)
    if value > 100_000:
        raise InvalidSpec(f"annotation {PREFIX}{raw_key}: must be at most 100", field=PREFIX + raw_key)
    return value


def parse_request(pod: dict[str, Any], default_pool: Callable[[], str]) -> AllocRequest:
    """Build the request of a pod given as a camelCase dict (as the API serves it)."""
    meta = pod.get("metadata") or {}
    ann: dict[str, str] = {k: str(v) for k, v in (meta.get("annotations") or {}).items()}
    t_req = _quantity(ann, "tflops-request", to_milli)
    t_lim = _quantity(ann, "tflops-limit", to_milli)
    v_req = _quantity(ann, "vram-request", to_bytes)
    v_lim = _quantity(ann, "vram-limit", to_bytes)
    p_req = _percent_m("compute-percent-request", ann)
    p_lim = _percent_m("compute-percent-limit", ann)
    if (t_req or t_lim) and (p_req or p_lim):
        raise InvalidSpec(
            f"annotations {PREFIX}tflops-* and {PREFIX}compute-percent-* are mutually exclusive",
            field=PREFIX + "compute-percent-request",
        )
    # A missing request is copied from its limit, and a missing limit from its request.
    t_req, t_lim = t_req or t_lim, t_lim or t_req
    v_req, v_lim = v_req or v_lim, v_lim or v_req
    p_req, p_lim = p_req or p_lim, p_lim or p_req
    dedicated = _bool(ann, "dedicated-gpu")
    if not dedicated and not (t_req or p_req or v_req):
        raise InvalidSpec(
            f"pod requests no GPU resources: set {PREFIX}tflops-request (or compute-percent-request) "
            f"and {PREFIX}vram-request",
            field=PREFIX + "tflops-request",
        )
    for what, r, lim in (("tflops", t_req, t_lim), ("vram", v_req, v_lim), ("compute-percent", p_req, p_lim)):
        if r > lim:
            raise InvalidSpec(
                f"annotation {PREFIX}{what}-request exceeds its limit", field=f"{PREFIX}{what}-request"
            )
    equal = (t_req, v_req, p_req) == (t_lim, v_lim, p_lim)
    qos = _choice(ann, "qos", QOS_LEVELS, "high" if equal and (t_req or p_req) and v_req else "medium")
    indices: tuple[int, ...] = ()
    raw_idx = ann.get(PREFIX + "gpu-indices", "").strip()
    if raw_idx:
        try:
            indices = tuple(sorted({int(p) for p in raw_idx.split(",") if p.strip()}))
        except ValueError:
            raise InvalidSpec(
                f"annotation {PREFIX}gpu-indices: expected comma-separated integers",
                field=PREFIX + "gpu-indices",
            ) from None
    pool = ann.get(PREFIX + "gpupool", "").strip() or default_pool()
    labels = meta.get("labels") or {}
    return AllocRequest(
        pod=PodRef(meta.get("namespace") or "default", meta.get("name") or "", meta.get("uid") or ""),
        pool=pool,
        request=Amount(t_req, v_req, p_req),
        limit=Amount(t_lim, v_lim, p_lim),
        gpu_count=_int(ann, "gpu-count", 1, 1, MAX_GPU_COUNT),
        qos=qos,
        isolation=_choice(ann, "isolation", ISOLATION_MODES, "soft"),
        gpu_model=ann.get(PREFIX + "gpu-model", "").strip(),
        vendor=ann.get(PREFIX + "vendor", "").strip(),
        gpu_indices=indices,
        dedicated_gpu=dedicated,
        workload=ann.get(PREFIX + "workload") or labels.get(PREFIX + "workload", ""),
        is_local_gpu=_bool(ann, "is-local-gpu"),
    )


def gpu_ids(pod: dict[str, Any]) -> list[str]:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_IDS, "")
    return [p.strip() for p in str(raw).split(",") if p.strip()]
