"""Host keys and preflight against real SSH servers on loopback (asyncssh, real shell commands)."""

from __future__ import annotations

from typing import Any

from lens_sshkit import SUDO_DENIED, WINDOWS_ISH, SshKit, SshNode
from lens_testkit import MakeLens, problem

BASE = "/api/cluster/bootstrap"
OTHER_FP = "SHA256:" + "Q" * 43


def _node(kit: SshKit, n: SshNode, roles: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "host": "127.0.0.1",
        "port": n.port,
        "roles": roles,
        "username": "root",
        "privateKey": kit.private_key,
        **extra,
    }


def _pin(n: SshNode, fp: str | None = None) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": n.port, "fingerprint": fp or n.fingerprint}


async def test_host_keys_read_without_auth(make_lens: MakeLens, ssh_kit: SshKit) -> None:
    lens = await make_lens()
    a = await ssh_kit.start()
    b = await ssh_kit.start()
    resp = await lens.request(
        "POST",
        f"{BASE}/host-keys",
        json={
            "nodes": [
                {"host": "127.0.0.1", "port": a.port},
                {"host": "127.0.0.1", "port": b.port},
                {"host": "127.0.0.1", "port": 1},
            ]
        },
    )
    assert resp.status_code == 200, resp.text
    items = resp.json()["items"]
    assert items[0] == {
        "host": "127.0.0.1",
        "port": a.port,
        "algorithm": "ssh-ed25519",
        "fingerprint": a.fingerprint,
    }
    assert items[1]["fingerprint"] == b.fingerprint and a.fingerprint != b.fingerprint
    assert items[2] == {"host": "127.0.0.1", "port": 1, "error": "Connection refused"}
    assert a.fingerprint.startswith("SHA256:") and len(a.fingerprint) == 7 + 43
    assert ssh_kit.auth_attempts == 0  # keys were read in the key exchange; no login was tried


async def test_host_range_cap_refused_instantly(make_lens: MakeLens) -> None:
    lens = await make_lens()
    resp = await lens.request(
        "POST", f"{BASE}/host-keys", json={"nodes": [{"host": "0.0.0.0-255.255.255.255"}]}
    )
    problem(resp, 400, "too_many_hosts")
    # Unknown keys are refused.
    resp = await lens.request("POST", f"{BASE}/host-keys", json={"nodes": [{"host": "a", "bogus": 1}]})
    problem(resp, 422, "unprocessable")


async def test_preflight_pass_and_failure_matrix(make_lens: MakeLens, ssh_kit: SshKit) -> None:
    lens = await make_lens()
    good = await ssh_kit.start(hostname="cp-0")
    no_sudo = await ssh_kit.start(sudo=SUDO_DENIED, hostname="w-1")
    bad_name = await ssh_kit.start(hostname="Bad_Name")
    old_os = await ssh_kit.start(hostname="w-3", os_release=WINDOWS_ISH)
    kubelet = await ssh_kit.start(hostname="w-4", kubelet=True)
    nodes = [_node(ssh_kit, good, ["control-plane"])] + [
        _node(ssh_kit, n, ["worker"]) for n in (no_sudo, bad_name, old_os, kubelet)
    ]
    pins = [_pin(n) for n in (good, no_sudo, bad_name, old_os, kubelet)]
    resp = await lens.request("POST", f"{BASE}/preflight", json={"nodes": nodes, "hostKeys": pins})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["allPassed"] is False
    by_port = {item["host"] + str(i): item for i, item in enumerate(body["items"])}
    items = list(by_port.values())
    status = [{c["id"]: c["status"] for c in item["checks"]} for item in items]
    assert items[0]["state"] == "passed" and set(status[0].values()) == {"passed"}
    assert items[0]["roles"] == ["control-plane"] and items[0]["checks"][0] == {
        "id": "ssh",
        "label": "SSH connectivity",
        "status": "passed",
        "detail": "reachable",
    }
    assert status[1]["sudo"] == "failed" and status[1]["hostname"] == "passed"
    assert "password is required" in _detail(items[1], "sudo")
    assert status[2]["hostname"] == "failed" and "Bad_Name" in _detail(items[2], "hostname")
    assert status[3]["os"] == "failed" and "Slackware" in _detail(items[3], "os")
    assert status[4]["kubernetes"] == "failed" and "kubelet" in _detail(items[4], "kubernetes")
    for s in status[1:]:
        assert s["ssh"] == "passed"
    # Only the single-fault node fails, and only on its fault.
    assert [sum(v == "failed" for v in s.values()) for s in status] == [0, 1, 1, 1, 1]

    # Bootstrap refuses without a passing preflight of the same nodes.
    resp = await lens.request("POST", BASE, json={"nodes": nodes, "hostKeys": pins})
    problem(resp, 409, "bootstrap_preflight_required")


def _detail(item: dict[str, Any], check: str) -> str:
    return next(c.get("detail") or "" for c in item["checks"] if c["id"] == check)


async def test_pin_mismatch_and_unreachable_skip(make_lens: MakeLens, ssh_kit: SshKit) -> None:
    lens = await make_lens()
    node = await ssh_kit.start()
    body = {"nodes": [_node(ssh_kit, node, ["control-plane"])], "hostKeys": [_pin(node, OTHER_FP)]}
    resp = await lens.request("POST", f"{BASE}/preflight", json=body)
    assert resp.status_code == 200, resp.text
    item = resp.json()["items"][0]
    assert item["state"] == "failed" and resp.json()["allPassed"] is False
    ssh = item["checks"][0]
    assert (
        ssh["status"] == "failed"
        and "host key mismatch" in ssh["detail"]
        and node.fingerprint in ssh["detail"]
    )
    assert {c["id"]: c["status"] for c in item["checks"][1:5]} == dict.fromkeys(
        ["sudo", "hostname", "os", "kubernetes"], "skipped"
    )

    # Unreachable: SSH fails, the rest is skipped.
    body = {
        "nodes": [
            {"host": "127.0.0.1", "port": 1, "roles": ["control-plane"], "privateKey": ssh_kit.private_key}
        ],
        "hostKeys": [{"host": "127.0.0.1", "port": 1, "fingerprint": OTHER_FP}],
    }
    item = (await lens.request("POST", f"{BASE}/preflight", json=body)).json()["items"][0]
    assert item["checks"][0]["status"] == "failed" and item["checks"][1]["status"] == "skipped"

    # Wrong credentials: the key is right, the login is not.
    body = {
        "nodes": [_node(ssh_kit, node, ["control-plane"], privateKey=None, password="wrong")],
        "hostKeys": [_pin(node)],
    }
    item = (await lens.request("POST", f"{BASE}/preflight", json=body)).json()["items"][0]
    assert item["checks"][0]["status"] == "failed"
    # A password login works (no agent, no ~/.ssh key is offered instead).
    body = {
        "nodes": [_node(ssh_kit, node, ["control-plane"], privateKey=None, password=ssh_kit.password)],
        "hostKeys": [_pin(node)],
    }
    assert (await lens.request("POST", f"{BASE}/preflight", json=body)).json()["allPassed"] is True
    # Without a configured Kubespray checkout a bootstrap cannot start.
    problem(await lens.request("POST", BASE, json=body), 503, "kubespray_missing")


async def test_pins_must_match_expanded_set(make_lens: MakeLens, ssh_kit: SshKit) -> None:
    lens = await make_lens()
    node = await ssh_kit.start()
    extra = {"host": "127.0.0.2", "port": 22, "fingerprint": OTHER_FP}
    for pins in ([], [_pin(node), extra]):
        resp = await lens.request(
            "POST",
            f"{BASE}/preflight",
            json={"nodes": [_node(ssh_kit, node, ["control-plane"])], "hostKeys": pins},
        )
        if pins:
            problem(resp, 400, "host_key_pins_mismatch")
        else:
            assert resp.status_code == 422
    bad_key = {
        "nodes": [_node(ssh_kit, node, ["control-plane"], privateKey="-----BEGIN nonsense")],
        "hostKeys": [_pin(node)],
    }
    body = problem(await lens.request("POST", f"{BASE}/preflight", json=bad_key), 422, "invalid_private_key")
    assert "nonsense" not in body["detail"]
    resp = await lens.request(
        "POST",
        f"{BASE}/preflight",
        json={
            "nodes": [_node(ssh_kit, node, ["control-plane"])],
            "hostKeys": [{**_pin(node), "fingerprint": "md5:xx"}],
        },
    )
    assert resp.status_code == 422


async def test_role_sanity(make_lens: MakeLens, ssh_kit: SshKit) -> None:
    lens = await make_lens()
    a = await ssh_kit.start()
    b = await ssh_kit.start()
    nodes = [_node(ssh_kit, a, ["control-plane"]), _node(ssh_kit, b, ["control-plane", "worker"])]
    body = (
        await lens.request("POST", f"{BASE}/preflight", json={"nodes": nodes, "hostKeys": [_pin(a), _pin(b)]})
    ).json()
    assert body["allPassed"] is False
    roles = next(c for c in body["items"][0]["checks"] if c["id"] == "roles")
    assert roles["status"] == "failed" and "odd" in roles["detail"]
