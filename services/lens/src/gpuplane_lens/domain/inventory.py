"""Kubespray inventory rendering (pure): groups, connection vars and proxy settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuplane_lens.domain.bootstrap import Node


@dataclass(frozen=True)
class ProxySettings:
    http_proxy: str | None = None
    https_proxy: str | None = None
    no_proxy: str | None = None


def extended_no_proxy(base: str | None, nodes: list[Node]) -> str:
    """The user's no_proxy plus loopback and every node address and name, so node-to-node and
    API server traffic never goes through the proxy. Order kept, duplicates dropped."""
    items = [p.strip() for p in (base or "").split(",") if p.strip()]
    items += ["127.0.0.1", "localhost"]
    for n in nodes:
        items += [n.target.host, n.name]
    return ",".join(dict.fromkeys(items))


def render_inventory(
    nodes: list[Node],
    *,
    key_files: dict[str, str],
    artifacts_dir: str,
    proxy: ProxySettings | None = None,
    extra_vars: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The inventory document. ``key_files`` maps node name -> private key file path; passwords
    are never rendered here (they go to 0600 host_vars files)."""
    hosts: dict[str, dict[str, Any]] = {}
    for n in nodes:
        entry: dict[str, Any] = {
            "ansible_host": n.target.host,
            "ansible_port": n.target.port,
            "ansible_user": n.username,
            "ip": n.target.host,
            "access_ip": n.target.host,
        }
        if n.name in key_files:
            entry["ansible_ssh_private_key_file"] = key_files[n.name]
        hosts[n.name] = entry
    control = {n.name: None for n in nodes if "control-plane" in n.roles}
    workers = {n.name: None for n in nodes if "worker" in n.roles}
    variables: dict[str, Any] = {
        "kubeconfig_localhost": True,
        "artifacts_dir": artifacts_dir,
    }
    if proxy is not None:
        if proxy.http_proxy:
            variables["http_proxy"] = proxy.http_proxy
        if proxy.https_proxy:
            variables["https_proxy"] = proxy.https_proxy
        if proxy.http_proxy or proxy.https_proxy:
            variables["no_proxy"] = extended_no_proxy(proxy.no_proxy, nodes)
    variables.update(extra_vars or {})
    return {
        "all": {
            "hosts": hosts,
            "vars": variables,
            "children": {
                "kube_control_plane": {"hosts": dict(control)},
                "etcd": {"hosts": dict(control)},
                "kube_node": {"hosts": dict(workers)},
                "k8s_cluster": {"children": {"kube_control_plane": None, "kube_node": None}},
            },
        }
    }
