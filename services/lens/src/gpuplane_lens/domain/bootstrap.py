"""Bootstrap rules: pins, roles, preflight results, job phases and the log tail."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field
from typing import Literal

from gpuplane_lens.domain.errors import rule_error
from gpuplane_lens.domain.hostspec import Target, expand

Role = Literal["control-plane", "worker"]
CheckStatus = Literal["passed", "failed", "skipped"]

PHASES = (
    "queued",
    "preflight",
    "provisioning",
    "running",
    "kubeconfig_ready",
    "succeeded",
    "failed",
    "cancelled",
)
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
LOG_TAIL_CHARS = 32_000

FINGERPRINT = re.compile(r"^SHA256:[A-Za-z0-9+/]{43}$")

# Operating systems the pinned Kubespray (v2.31.0) supports: os-release ID -> VERSION_ID prefixes.
SUPPORTED_OS: dict[str, tuple[str, ...]] = {
    "ubuntu": ("22.04", "24.04"),
    "debian": ("11", "12", "13"),
    "rhel": ("8", "9", "10"),
    "rocky": ("8", "9", "10"),
    "almalinux": ("8", "9", "10"),
    "centos": ("9", "10"),
    "ol": ("8", "9"),
    "fedora": ("41", "42"),
    "amzn": ("2023",),
    "opensuse-leap": ("15",),
    "flatcar": ("",),
    "openeuler": ("22.03", "24.03"),
}


@dataclass(frozen=True)
class Credentials:
    private_key: str | None = None
    password: str | None = None


@dataclass(frozen=True)
class Node:
    """One expanded target with the row's roles and SSH login."""

    target: Target
    roles: tuple[Role, ...]
    username: str
    credentials: Credentials = field(default_factory=Credentials, repr=False)

    @property
    def name(self) -> str:
        """Inventory name: the host with dots and colons made dashes (``10-0-0-1``), plus the
        port when it is not 22 so two SSH ports of one address stay two inventory hosts."""
        base = re.sub(r"[^a-z0-9-]", "-", self.target.host.lower()).strip("-") or "node"
        return base if self.target.port == 22 else f"{base}-{self.target.port}"


@dataclass(frozen=True)
class NodeRow:
    host: str
    port: int
    roles: tuple[Role, ...]
    username: str
    credentials: Credentials = field(default_factory=Credentials, repr=False)


def expand_rows(rows: list[NodeRow]) -> list[Node]:
    expanded = expand([(r.host, r.port) for r in rows])
    nodes: list[Node] = []
    for i, (row, targets) in enumerate(zip(rows, expanded, strict=True)):
        if not row.roles:
            raise rule_error(
                "a node needs at least one role", code="invalid_roles", field=f"nodes[{i}].roles"
            )
        nodes.extend(Node(t, row.roles, row.username, row.credentials) for t in targets)
    return nodes


def check_pins(nodes: list[Node], pins: list[tuple[str, int, str]]) -> dict[Target, str]:
    """Pins must name exactly the expanded host:port set, one well-formed fingerprint each."""
    by_target: dict[Target, str] = {}
    for i, (host, port, fp) in enumerate(pins):
        if not FINGERPRINT.match(fp):
            raise rule_error(
                "fingerprint must be SHA256:<43 base64 characters>",
                code="invalid_host_key_pin",
                kind="bad_request",
                field=f"hostKeys[{i}].fingerprint",
            )
        t = Target(host.lower(), port)
        if t in by_target:
            raise rule_error(
                f"{t.address} is pinned twice",
                code="invalid_host_key_pin",
                kind="bad_request",
                field=f"hostKeys[{i}]",
            )
        by_target[t] = fp
    wanted = {n.target for n in nodes}
    if set(by_target) != wanted:
        missing = sorted(t.address for t in wanted - set(by_target))
        extra = sorted(t.address for t in set(by_target) - wanted)
        raise rule_error(
            f"hostKeys must pin exactly the expanded hosts; missing {missing}, unexpected {extra}",
            code="host_key_pins_mismatch",
            kind="bad_request",
            field="hostKeys",
        )
    return by_target


def fingerprint_matches(pinned: str, presented: str) -> bool:
    """Constant-time comparison, so timing reveals nothing about the pin."""
    return hmac.compare_digest(pinned.encode(), presented.encode())


def role_problems(nodes: list[Node]) -> list[str]:
    """Cluster-wide sanity: a control plane exists and etcd (on the control planes) has an odd size."""
    control = sum(1 for n in nodes if "control-plane" in n.roles)
    problems = []
    if control == 0:
        problems.append("at least one node must have the control-plane role")
    elif control % 2 == 0:
        problems.append(f"etcd runs on the control-plane nodes and needs an odd member count, got {control}")
    return problems


def parse_os_release(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def os_supported(os_release: dict[str, str]) -> tuple[bool, str]:
    os_id = os_release.get("ID", "")
    version = os_release.get("VERSION_ID", "")
    pretty = os_release.get("PRETTY_NAME") or f"{os_id} {version}".strip() or "unknown OS"
    prefixes = SUPPORTED_OS.get(os_id)
    if prefixes is None or not any(version == p or version.startswith(p + ".") or p == "" for p in prefixes):
        return False, f"{pretty} is not supported by the pinned Kubespray"
    return True, pretty


@dataclass(frozen=True)
class Check:
    id: str
    label: str
    status: CheckStatus
    detail: str | None = None


CHECK_LABELS = {
    "ssh": "SSH connectivity",
    "sudo": "Passwordless sudo",
    "hostname": "RFC 1123 hostname",
    "os": "Supported operating system",
    "kubernetes": "No existing Kubernetes",
    "roles": "Role assignment",
}


def node_state(checks: list[Check]) -> str:
    return "passed" if all(c.status == "passed" for c in checks) else "failed"


def preflight_key(nodes: list[Node], pins: dict[Target, str]) -> str:
    """Identifies a node set, its logins and pins; a bootstrap needs a passing preflight of the same key."""
    doc = [
        [
            n.target.host,
            n.target.port,
            list(n.roles),
            n.username,
            hashlib.sha256(
                json.dumps([n.credentials.private_key, n.credentials.password]).encode()
            ).hexdigest(),
            pins[n.target],
        ]
        for n in sorted(nodes, key=lambda n: n.target)
    ]
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()


def append_tail(tail: str, chunk: str, limit: int = LOG_TAIL_CHARS) -> str:
    joined = tail + chunk
    return joined[-limit:] if len(joined) > limit else joined
