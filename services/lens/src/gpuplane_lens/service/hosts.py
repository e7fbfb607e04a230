"""Addresses of this Lens host, offered to the cluster form's "Lens address" field."""

from __future__ import annotations

import ipaddress
import socket


def _default_route_ip() -> str | None:
    # A UDP "connect" picks the outgoing interface without sending a packet.
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            return str(s.getsockname()[0])
    except OSError:
        return None


def lens_hosts(configured: list[str]) -> list[str]:
    if configured:
        return list(dict.fromkeys(configured))
    found: list[str] = []
    first = _default_route_ip()
    if first:
        found.append(first)
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, family=socket.AF_INET)
    except OSError:
        infos = []
    for info in infos:
        found.append(str(info[4][0]))
    usable = [h for h in dict.fromkeys(found) if not ipaddress.ip_address(h).is_loopback]
    return usable or [socket.gethostname()]
