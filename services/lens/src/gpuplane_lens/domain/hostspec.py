"""Host specs of the bootstrap node table, expanded to exact host:port targets.

A row's ``host`` is a single IP or hostname, a comma-separated list, a shorthand IPv4
range (``10.0.0.10-20``, last octet only) or a full IPv4 range (``10.0.0.250-10.0.1.5``).
Every range's size is computed arithmetically and checked against the cap BEFORE anything
is expanded, so ``0.0.0.0-255.255.255.255`` is refused at once without allocating.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from gpuplane_core.errors import GpuplaneError
from gpuplane_lens.domain.errors import rule_error

MAX_EXPANDED_HOSTS = 256

_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


@dataclass(frozen=True, order=True)
class Target:
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _invalid(message: str, field: str) -> GpuplaneError:
    return rule_error(message, code="invalid_host_spec", kind="bad_request", field=field)


def _range(part: str, field: str) -> tuple[int, int] | None:
    """(first, last) as integers for an IPv4 range, None for a single host."""
    if "-" not in part:
        return None
    left, _, right = part.partition("-")
    try:
        first = ipaddress.IPv4Address(left.strip())
    except ValueError:
        return None  # a hostname containing "-", checked as a hostname below
    right = right.strip()
    if right.isdigit():
        last_octet = int(right)
        if last_octet > 255:
            raise _invalid(f"range end {right!r} is not an octet", field)
        last = int(first) & ~0xFF | last_octet
    else:
        try:
            last = int(ipaddress.IPv4Address(right))
        except ValueError:
            raise _invalid(f"range end {right!r} is not an IPv4 address", field) from None
    if last < int(first):
        raise _invalid(f"range {part!r} ends before it starts", field)
    return int(first), last


def _single(part: str, field: str) -> str:
    try:
        return str(ipaddress.ip_address(part.strip("[]")))
    except ValueError:
        pass
    if not _HOSTNAME.match(part):
        raise _invalid(f"{part!r} is neither an IP address nor a hostname", field)
    return part.lower()


def expand(rows: list[tuple[str, int]], cap: int = MAX_EXPANDED_HOSTS) -> list[list[Target]]:
    """Targets of each row (same order); the total over all rows is capped."""
    parsed: list[list[tuple[str, int, int] | str]] = []
    total = 0
    for i, (spec, port) in enumerate(rows):
        field = f"nodes[{i}].host"
        if not 1 <= port <= 65535:
            raise _invalid(f"port {port} is out of range", f"nodes[{i}].port")
        parts = [p.strip() for p in spec.split(",") if p.strip()]
        if not parts:
            raise _invalid("host is empty", field)
        row: list[tuple[str, int, int] | str] = []
        for part in parts:
            bounds = _range(part, field)
            if bounds is None:
                row.append(_single(part, field))
                total += 1
            else:
                total += bounds[1] - bounds[0] + 1
                row.append((part, *bounds))
            if total > cap:
                raise rule_error(
                    f"host specs expand to more than {cap} hosts",
                    code="too_many_hosts",
                    kind="bad_request",
                    field=field,
                )
        parsed.append(row)
    out: list[list[Target]] = []
    seen: set[Target] = set()
    for i, ((_, port), row) in enumerate(zip(rows, parsed, strict=True)):
        targets: list[Target] = []
        for item in row:
            hosts = (
                [item]
                if isinstance(item, str)
                else [str(ipaddress.IPv4Address(n)) for n in range(item[1], item[2] + 1)]
            )
            for host in hosts:
                t = Target(host, port)
                if t in seen:
                    raise _invalid(f"{t.address} is listed twice", f"nodes[{i}].host")
                seen.add(t)
                targets.append(t)
        out.append(targets)
    return out


def is_rfc1123_hostname(name: str) -> bool:
    """A node name Kubernetes accepts: lower-case RFC 1123 labels, at most 253 characters."""
    return bool(_HOSTNAME.match(name)) and name == name.lower()
