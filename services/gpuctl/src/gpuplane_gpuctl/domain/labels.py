"""Node label rules: Kubernetes' syntax for keys and values, and the labels gpuctl will not touch.

Keys are `[prefix/]name`: the prefix a DNS-1123 subdomain of at most 253
characters, the name at most 63 characters of alphanumerics, '-', '_' and '.',
starting and ending alphanumeric. Values follow the name rule (and may be empty).
Labels under `kubernetes.io` / `k8s.io` (and their subdomains, such as
`node-role.kubernetes.io`) belong to Kubernetes and the kubelet; changing them
through gpuctl is refused.
"""

from __future__ import annotations

import re

from gpuplane_core.errors import Forbidden, InvalidSpec

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PROTECTED_DOMAINS = ("kubernetes.io", "k8s.io")

POOL_LABEL = "runwhere.ai/pool"
GPU_TYPE_LABEL = "runwhere.ai/gpu-type"
# Labels reported by GET /nodes/labels/all: gpuctl's own plus what GPU discovery sets.
GPU_LABEL_PREFIXES = ("runwhere.ai/", "nvidia.com/", "tensor-fusion.ai/")


def validate_key(key: str, field: str = "key") -> str:
    if not key:
        raise InvalidSpec(f"{field}: label key must not be empty", field=field)
    prefix, sep, name = key.rpartition("/")
    if sep:
        if not prefix or len(prefix) > 253 or not _SUBDOMAIN.match(prefix):
            raise InvalidSpec(
                f"{field}: label key prefix {prefix!r} must be a DNS-1123 subdomain "
                "(lowercase letters, digits, '-' and '.', at most 253 characters)",
                field=field,
            )
    if len(name) > 63 or not _NAME.match(name):
        raise InvalidSpec(
            f"{field}: label key name {name!r} must be at most 63 characters of letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit",
            field=field,
        )
    return key


def validate_value(value: str, field: str = "value") -> str:
    if value and (len(value) > 63 or not _NAME.match(value)):
        raise InvalidSpec(
            f"{field}: label value {value!r} must be empty or at most 63 characters of letters, "
            "digits, '-', '_' or '.', starting and ending with a letter or digit",
            field=field,
        )
    return value


def is_protected(key: str) -> bool:
    prefix, sep, _ = key.rpartition("/")
    if not sep:
        return False
    return any(prefix == d or prefix.endswith("." + d) for d in PROTECTED_DOMAINS)


def check_changeable(key: str, field: str = "key") -> str:
    """A valid key that gpuctl may set or remove (400 when malformed, 403 when a system label)."""
    validate_key(key, field)
    if is_protected(key):
        raise Forbidden(
            f"{field}: label {key} is a Kubernetes system label and cannot be changed",
            field=field,
            code="protected_label",
        )
    return key


def is_gpu_label(key: str) -> bool:
    return key.startswith(GPU_LABEL_PREFIXES)
