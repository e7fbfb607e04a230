"""Admin kubeconfig and a TLS context for talking to the local apiserver."""

from __future__ import annotations

import base64
import os
import ssl
from pathlib import Path

import yaml

from devcluster.pki import Pki


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_admin_kubeconfig(path: Path, pki: Pki, server: str, context: str) -> None:
    """Self-contained (certificates embedded) and readable only by the owner."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": context, "cluster": {"server": server, "certificate-authority-data": _b64(pki.ca_cert)}}
        ],
        "users": [
            {
                "name": f"{context}-admin",
                "user": {
                    "client-certificate-data": _b64(pki.path("admin.crt")),
                    "client-key-data": _b64(pki.path("admin.key")),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": f"{context}-admin"}}],
        "current-context": context,
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)


def admin_ssl_context(pki: Pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    ctx.load_cert_chain(str(pki.path("admin.crt")), str(pki.path("admin.key")))
    return ctx
