"""Fixtures of the fault suite: each service's own test helpers are importable from here."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
# The fault tests drive the services with the same helpers as the services' own tests
# (controller_testkit, lens_sshkit, ...) instead of copies of them.
for _svc in ("controller", "hypervisor", "gpuctl", "lens"):
    _path = str(_ROOT / "services" / _svc / "tests")
    if _path not in sys.path:
        sys.path.append(_path)

# The four services with default settings, shared by the fuzz and hostile-input tests (one
# instance per session: a fixture defined in each test module would start them twice).
from reliability_kit import shared_services as shared_services  # noqa: E402
