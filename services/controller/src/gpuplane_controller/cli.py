"""`tf-controller` / `python -m gpuplane_controller`: Go-style single-dash flags, as TensorFusion's
controller documents them, on top of the GPUPLANE_CONTROLLER_* environment (flags win)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from gpuplane_controller.settings import Settings


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r} (use true or false)")


# flag -> (settings field, type, help); `bool` flags take an optional value (`-enable-auto-expander`
# alone means true, `-leader-elect=false` turns it off), like Go's flag package.
FLAGS: list[tuple[str, str, Any, str]] = [
    ("-port", "http_port", int, "HTTP port of the API (default 8080)"),
    ("-bind-address", "http_host", str, "HTTP listen address"),
    ("-grpc-port", "grpc_port", int, "gRPC port of NodeAgentService/CapacityService (default 9090)"),
    ("-grpc-bind-address", "grpc_host", str, "gRPC listen address"),
    ("-kubeconfig", "kubeconfig", str, "kubeconfig path (default: in-cluster, then $KUBECONFIG)"),
    ("-cluster-host-port-range", "cluster_host_port_range", str, "host ports handed out, e.g. 42000-62000"),
    ("-enable-auto-expander", "enable_auto_expander", bool, "create GPUNodeClaims for unschedulable pods"),
    ("-leader-elect", "leader_elect", bool, "elect a leader with a coordination.k8s.io Lease"),
    ("-leader-elect-lease-name", "lease_name", str, "name of the leader Lease"),
    ("-leader-elect-namespace", "lease_namespace", str, "namespace of the leader Lease"),
    ("-config", "dynamic_config_path", str, "dynamic config YAML file (hot-reloaded)"),
    ("-dynamic-config", "dynamic_config_path", str, "alias of -config"),
    ("-dynamic-config-configmap", "dynamic_config_configmap", str, "ConfigMap with the dynamic config"),
    ("-dynamic-config-namespace", "dynamic_config_namespace", str, "namespace of that ConfigMap"),
    ("-heartbeat-timeout", "heartbeat_timeout_seconds", float, "seconds without heartbeat before Unknown"),
    ("-log-level", "log_level", str, "CRITICAL, ERROR, WARNING, INFO or DEBUG"),
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tf-controller",
        description="gpuplane controller: TensorFusion-compatible scheduler, allocator and API.",
        prefix_chars="-",
        allow_abbrev=False,  # Go's flag package takes whole names only
    )
    fields = Settings.model_fields
    for flag, field, kind, text in FLAGS:
        if field not in fields:
            continue  # a setting this build does not have
        if kind is bool:
            p.add_argument(flag, dest=field, type=_bool, nargs="?", const=True, default=None, help=text)
        else:
            p.add_argument(flag, dest=field, type=kind, default=None, metavar="VALUE", help=text)
    return p


def _go_style(argv: Sequence[str]) -> list[str]:
    """`--flag` is accepted as `-flag` too (Go's flag package takes both)."""
    out = []
    for a in argv:
        if a.startswith("--") and len(a) > 2:
            a = a[1:]
        out.append(a)
    return out


def settings_from_args(argv: Sequence[str] | None = None) -> Settings:
    p = parser()
    ns = p.parse_args(_go_style(sys.argv[1:] if argv is None else argv))
    overrides = {k: v for k, v in vars(ns).items() if v is not None}
    try:
        return Settings(**overrides)
    except ValidationError as e:
        err = e.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        flag = next((f for f, name, _, _ in FLAGS if name == field), field)
        p.error(f"invalid value for {flag}: {err['msg']}")
        raise  # unreachable: p.error exits with status 2


def main(argv: Sequence[str] | None = None) -> None:
    from gpuplane_controller.main import SERVICE, build_app  # the app imports everything; flags first
    from gpuplane_core.app import serve

    settings = settings_from_args(argv)
    serve(build_app(settings), settings, SERVICE)
