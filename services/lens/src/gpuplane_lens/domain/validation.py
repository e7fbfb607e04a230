"""Checks of user input for cluster registration and settings (pure)."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlparse

from gpuplane_core.errors import GpuplaneError, InvalidSpec
from gpuplane_core.yaml_limits import load_bounded
from gpuplane_lens.domain.errors import rule_error
from gpuplane_lens.domain.records import Proxy

GATEWAY_PROVIDERS = ("envoy-ai-gateway", "istio", "agentgateway", "gke")
# Providers whose gateway calls back into Lens and therefore need an authz host.
PROVIDERS_WITH_LENS_HOOK = ("envoy-ai-gateway", "istio", "agentgateway")
NODE_PORT_MIN, NODE_PORT_MAX = 30000, 32767
DEFAULT_GATEWAY_PREFIX = "lens-gateway"
MAX_NAME_CHARS = 128
MAX_DESCRIPTION_CHARS = 2048
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kubeconfig keys that make Lens read local files or run commands on the Lens host:
# an uploaded kubeconfig must carry its credentials inline.
_FORBIDDEN_CLUSTER_KEYS = ("certificate-authority",)
_FORBIDDEN_USER_KEYS = ("client-certificate", "client-key", "tokenFile", "exec", "auth-provider")


def _invalid_kubeconfig(message: str) -> GpuplaneError:
    return rule_error(message, code="invalid_kubeconfig", field="file")


def parse_kubeconfig(data: bytes) -> dict[str, Any]:
    """The parsed kubeconfig, or `invalid_kubeconfig` naming what is wrong (never echoing content)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid_kubeconfig("kubeconfig is not UTF-8") from None
    try:
        # Bounded: a deeply nested or alias-bomb upload is refused, never a RecursionError (500).
        doc = load_bounded(data, field="file")
    except InvalidSpec as e:
        # Say which limit was hit, but never quote the parser's view of the content.
        reason = "" if e.message.startswith("invalid YAML") else f": {e.message}"
        raise _invalid_kubeconfig(f"kubeconfig is not valid YAML{reason}") from None
    if not isinstance(doc, dict):
        raise _invalid_kubeconfig("kubeconfig must be a YAML mapping")
    if doc.get("kind", "Config") != "Config":
        raise _invalid_kubeconfig("kubeconfig kind must be Config")
    clusters = _named(doc, "clusters", "cluster")
    users = _named(doc, "users", "user")
    contexts = _named(doc, "contexts", "context")
    current = doc.get("current-context") or (next(iter(contexts)) if len(contexts) == 1 else None)
    if not current or current not in contexts:
        raise _invalid_kubeconfig("kubeconfig has no usable current-context")
    ctx = contexts[current]
    cluster = clusters.get(str(ctx.get("cluster", "")))
    if cluster is None:
        raise _invalid_kubeconfig(f"context {current!r} names an unknown cluster")
    server = cluster.get("server")
    parsed = urlparse(str(server or ""))
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise _invalid_kubeconfig("cluster server must be an http(s) URL")
    for key in _FORBIDDEN_CLUSTER_KEYS:
        if key in cluster:
            raise _invalid_kubeconfig(f"cluster.{key} refers to a local file; use {key}-data")
    user_name = ctx.get("user")
    if user_name is not None:
        user = users.get(str(user_name))
        if user is None:
            raise _invalid_kubeconfig(f"context {current!r} names an unknown user")
        for key in _FORBIDDEN_USER_KEYS:
            if key in user:
                raise _invalid_kubeconfig(f"user.{key} is not supported; embed the credentials")
    return doc


def _named(doc: dict[str, Any], key: str, inner: str) -> dict[str, dict[str, Any]]:
    items = doc.get(key) or []
    if not isinstance(items, list):
        raise _invalid_kubeconfig(f"kubeconfig {key} must be a list")
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _invalid_kubeconfig(f"every entry of {key} needs a name")
        body = item.get(inner) or {}
        if not isinstance(body, dict):
            raise _invalid_kubeconfig(f"{key}[{item['name']}].{inner} must be a mapping")
        out[item["name"]] = body
    return out


def kubeconfig_server(doc: dict[str, Any]) -> str:
    contexts = _named(doc, "contexts", "context")
    current = doc.get("current-context") or next(iter(contexts))
    clusters = _named(doc, "clusters", "cluster")
    return str(clusters[contexts[current]["cluster"]]["server"])


_PROXY_KEYS = {"mode", "httpProxy", "httpsProxy", "noProxy"}


def parse_proxy(value: Any) -> Proxy:
    """A ProxyConfigDTO (dict or JSON text) → Proxy, else `invalid_proxy_config`."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise rule_error("proxy is not valid JSON", code="invalid_proxy_config", field="proxy") from None
    if not isinstance(value, dict):
        raise rule_error("proxy must be an object", code="invalid_proxy_config", field="proxy")
    unknown = sorted(set(value) - _PROXY_KEYS)
    if unknown:
        raise rule_error(f"proxy has unknown keys {unknown}", code="invalid_proxy_config", field="proxy")
    mode = value.get("mode", "auto")
    if mode not in ("auto", "custom"):
        raise rule_error("proxy.mode must be auto or custom", code="invalid_proxy_config", field="proxy.mode")
    fields: dict[str, str] = {}
    for key in ("httpProxy", "httpsProxy", "noProxy"):
        raw = value.get(key) or ""
        if not isinstance(raw, str):
            raise rule_error(
                f"proxy.{key} must be a string", code="invalid_proxy_config", field=f"proxy.{key}"
            )
        if key != "noProxy" and raw and urlparse(raw).scheme not in ("http", "https", "socks5"):
            raise rule_error(
                f"proxy.{key} must be an http(s) URL", code="invalid_proxy_config", field=f"proxy.{key}"
            )
        fields[key] = raw.strip()
    if mode == "custom" and not (fields["httpProxy"] or fields["httpsProxy"]):
        raise rule_error(
            "proxy.mode custom needs httpProxy or httpsProxy", code="invalid_proxy_config", field="proxy"
        )
    return Proxy(
        mode=mode,
        http_proxy=fields["httpProxy"],
        https_proxy=fields["httpsProxy"],
        no_proxy=fields["noProxy"],
    )


def check_name(name: str | None) -> str:
    cleaned = (name or "").strip()
    if not cleaned:
        raise rule_error("name is required", code="invalid_cluster_name", field="name")
    if len(cleaned) > MAX_NAME_CHARS:
        raise rule_error(
            f"name exceeds {MAX_NAME_CHARS} characters", code="invalid_cluster_name", field="name"
        )
    return cleaned


def check_description(text: str | None) -> str:
    cleaned = (text or "").strip()
    if len(cleaned) > MAX_DESCRIPTION_CHARS:
        raise rule_error(
            f"description exceeds {MAX_DESCRIPTION_CHARS} characters",
            code="invalid_description",
            field="description",
        )
    return cleaned


def check_gateway_provider(provider: str | None) -> str | None:
    if provider is None or provider == "":
        return None
    if provider not in GATEWAY_PROVIDERS:
        raise rule_error(
            f"gatewayProvider must be one of {', '.join(GATEWAY_PROVIDERS)}",
            code="invalid_gateway_provider",
            field="gatewayProvider",
        )
    return provider


def check_gateway_port(port: int | None) -> int | None:
    if port is None:
        return None
    if not NODE_PORT_MIN <= port <= NODE_PORT_MAX:
        raise rule_error(
            f"gatewayPort must be a NodePort between {NODE_PORT_MIN} and {NODE_PORT_MAX}",
            code="invalid_gateway_port",
            field="gatewayPort",
        )
    return port


def check_inotify(value: int | None) -> int | None:
    if value is None:
        return None
    if not 128 <= value <= 1 << 20:
        raise rule_error(
            "inotifyMaxUserInstances must be between 128 and 1048576",
            code="invalid_inotify_max_user_instances",
            field="inotifyMaxUserInstances",
        )
    return value


def check_host(value: str | None, field: str) -> str | None:
    """A bare host or IP (the scheme, port and path are added by Lens)."""
    if value is None:
        return None
    host = value.strip()
    if not host:
        return None
    if len(host) > 253 or any(c in host for c in "/ \t?#@"):
        raise rule_error(
            f"{field} must be a host name or IP address", code="invalid_gateway_host", field=field
        )
    return host


def gateway_prefix(value: str | None, cluster_id: str) -> str | None:
    """The namespace prefix to store: the id suffix removed, so it is never added twice."""
    if value is None:
        return None
    prefix = value.strip()
    suffix = f"-{cluster_id}"
    if prefix.endswith(suffix):
        prefix = prefix[: -len(suffix)]
    if not prefix:
        return None
    if len(prefix) > 63 or not _DNS_LABEL.match(prefix) or len(prefix) + len(suffix) > 63:
        raise rule_error(
            "gatewayNamespace must be a DNS label of at most 63 characters including the -<id> suffix",
            code="invalid_gateway_namespace",
            field="gatewayNamespace",
        )
    return prefix


def gateway_namespace(prefix: str | None, cluster_id: str) -> str:
    """`lens-gateway-<id>` by default, `<prefix>-<id>` otherwise (also for the old shared default)."""
    return f"{prefix or DEFAULT_GATEWAY_PREFIX}-{cluster_id}"


def check_secret_ref(namespace: str | None, name: str | None) -> tuple[str, str]:
    for field, value in (("namespace", namespace), ("name", name)):
        if not value or not isinstance(value, str):
            raise rule_error(f"{field} is required", code="invalid_secret_ref", field=field)
        limit = 63 if field == "namespace" else 253
        if (
            len(value) > limit
            or not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", value)
            or (field == "namespace" and "." in value)
        ):
            raise rule_error(
                f"{field} must be a valid Kubernetes name", code="invalid_secret_ref", field=field
            )
    assert namespace is not None and name is not None
    return namespace, name


def check_token(token: str | None) -> str:
    if token is None or not token.strip():
        raise rule_error("token must not be empty", code="invalid_secret_token", field="token")
    if any(c in token for c in "\r\n\0"):
        raise rule_error("token must be a single line", code="invalid_secret_token", field="token")
    return token.strip()


_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def check_node_names(names: Any) -> list[str]:
    if not isinstance(names, list) or not names:
        raise rule_error(
            "names must be a non-empty list of node names", code="invalid_node_names", field="names"
        )
    if len(names) > 1000:
        raise rule_error("at most 1000 nodes at a time", code="invalid_node_names", field="names")
    for name in names:
        if not isinstance(name, str) or len(name) > 253 or not _NODE_NAME.match(name):
            raise rule_error("names must be Kubernetes node names", code="invalid_node_names", field="names")
    return list(dict.fromkeys(names))
