"""Lens never shows a planted HF token or kubeconfig secret: not in any response, not in its
log (the real process, at DEBUG), not in its database file in plaintext.

`services/lens/tests/test_lens_clusters_api.py::test_tokens_never_leak` covers the happy path
in-process (caplog). This test adds what that one cannot see: the server's actual log output
as a process, the error paths (unreachable cluster, refused kubeconfigs, invalid secret
references, unknown fields, a token with a newline), and a kubeconfig whose secret is a client
key (`client-key-data`), not only a bearer token.
"""

from __future__ import annotations

import base64
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes_asyncio import client
from reliability_kit import LoggedService, service

HF = f"hf_RelPlanted{secrets.token_hex(8)}"
KC_TOKEN = f"kc-RelPlanted-{secrets.token_hex(12)}"


def client_key_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


KEY_PEM = client_key_pem()
KEY_B64 = base64.b64encode(KEY_PEM).decode()
# The key's body lines (no PEM armour), so a re-encoded copy is caught as well.
KEY_LINES = [ln for ln in KEY_PEM.decode().splitlines() if ln and not ln.startswith("-----")]


def kubeconfig(server: str, user: dict[str, Any]) -> bytes:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).encode()


@pytest.fixture
def lens(devcluster: Any, tmp_path: Path) -> Iterator[LoggedService]:
    svc = service(
        "lens",
        devcluster.kubeconfig,
        tmp_path,
        GPUPLANE_LENS_LOG_LEVEL="DEBUG",
        GPUPLANE_LENS_LOG_JSON="true",
    )
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture
async def admin_token(kube_api: Any, namespace: str, mint_token: Any) -> Any:
    rbac = client.RbacAuthorizationV1Api(kube_api)
    token = await mint_token(namespace, "lens-admin")
    binding = f"rel-lens-admin-{namespace}"
    await rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "lens-admin", "namespace": namespace}],
        }
    )
    try:
        yield token
    finally:
        await rbac.delete_cluster_role_binding(binding)


async def test_planted_secrets_never_leak(
    lens: LoggedService, devcluster: Any, namespace: str, admin_token: str, tmp_path: Path
) -> None:
    server = yaml.safe_load(devcluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    responses: list[httpx.Response] = []
    async with httpx.AsyncClient(base_url=lens.url, timeout=60) as http:

        async def call(method: str, url: str, **kw: Any) -> httpx.Response:
            resp = await http.request(method, url, **kw)
            responses.append(resp)
            assert resp.status_code < 500 or resp.status_code in (502, 503, 504), resp.text
            return resp

        async def register(name: str, data: bytes, **fields: str) -> httpx.Response:
            return await call(
                "POST", "/api/cluster/clusters", data={"name": name, **fields}, files={"file": ("kc", data)}
            )

        # A real cluster, reached with a token that is itself a planted secret.
        real = await register("real", kubeconfig(server, {"token": admin_token}))
        assert real.status_code == 201, real.text
        cid = real.json()["cluster"]["id"]
        url = f"/api/cluster/clusters/{cid}/hf-token-secrets"
        ok = await call("POST", url, json={"namespace": namespace, "name": "hf", "token": HF})
        assert ok.status_code == 200, ok.text
        await call("PUT", f"/api/cluster/clusters/{cid}/hf-token-secret", json={"token": HF + "x"})
        await call("GET", "/api/cluster/model-secrets", params={"clusterId": cid})
        sid = (await call("GET", "/api/cluster/session", params={"clusterId": cid})).json()["sessionId"]
        await call("GET", f"/api/cluster/sessions/{sid}/planning-discovery/secrets")
        await call("GET", "/api/cluster/overview", params={"clusterId": cid})
        # Error paths that hold a secret in the request.
        for body in (
            {"namespace": "Not_Valid", "name": "hf", "token": HF},
            {"namespace": namespace, "name": "../hf", "token": HF},
            {"namespace": namespace, "name": "hf2", "token": HF + "\nsecond-line"},
            {"namespace": namespace, "name": "hf", "token": HF},  # exists already: 409
            {"namespace": namespace, "name": "hf3", "tokn": HF},  # unknown field: 422
        ):
            resp = await call("POST", url, json=body)
            assert 400 <= resp.status_code < 500, resp.text
        # Kubeconfigs with a client key: unreachable (draft and not), refused, malformed.
        with_key = kubeconfig("https://127.0.0.1:1", {"token": KC_TOKEN, "client-key-data": KEY_B64})
        assert (await register("draft", with_key, draft="true")).status_code == 201
        await register("unreachable", with_key)
        refused = kubeconfig(server, {"token": KC_TOKEN, "exec": {"command": "cat", "args": [KEY_B64]}})
        assert (await register("exec", refused)).status_code == 422
        broken = with_key + b"\n  - ][ " + KC_TOKEN.encode()
        assert (await register("broken", broken)).status_code == 422
        draft_id = next(
            c["id"]
            for c in (await call("GET", "/api/cluster/clusters", params={"includeDrafts": "true"})).json()[
                "items"
            ]
            if c["name"] == "draft"
        )
        await call("PATCH", f"/api/cluster/clusters/{draft_id}", json={"description": "d"})
        await call(
            "POST",
            f"/api/cluster/clusters/{draft_id}/hf-token-secrets",
            json={"namespace": "default", "name": "hf", "token": HF},
        )
        await call("GET", "/openapi.json")
    lens.stop()

    planted = {
        "kubeconfig token": admin_token,
        "kubeconfig token payload": admin_token.split(".")[1],
        "planted kubeconfig token": KC_TOKEN,
        "hf token": HF,
        "hf token (base64)": base64.b64encode(HF.encode()).decode(),
        "client-key-data": KEY_B64,
        **{f"client key line {i}": line for i, line in enumerate(KEY_LINES)},
    }

    def leaks(text: str) -> list[str]:
        return [what for what, value in planted.items() if value in text]

    for resp in responses:
        found = leaks(resp.text + str(resp.headers))
        assert not found, f"{resp.request.method} {resp.request.url}: {found}"
    log = lens.log()
    assert "DEBUG" in log or '"level": "debug"' in log.lower(), "the log ran at DEBUG"
    assert not leaks(log), leaks(log)
    data_dir = tmp_path / "lens-data"
    db_files = sorted(data_dir.glob("lens.db*"))
    assert db_files, list(data_dir.iterdir())
    for f in db_files:
        blob = f.read_bytes().decode("latin-1")
        assert not leaks(blob), (f, leaks(blob))
    # ... and the clusters are stored there, with their kubeconfigs as ciphertext (not missing).
    with sqlite3.connect(data_dir / "lens.db") as db:
        stored = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        sizes = [
            len(v)
            for table in stored
            for row in db.execute(f'select * from "{table}"')
            for v in row
            if isinstance(v, bytes | str) and len(v) > 500
        ]
    assert sizes, "no stored kubeconfig ciphertext found"
    # Certificate data Lens must hand to ssl as files lives only in a private directory.
    for f in (data_dir / "kube-tmp").rglob("*") if (data_dir / "kube-tmp").exists() else []:
        if f.is_file():
            assert f.stat().st_mode & 0o077 == 0, f
