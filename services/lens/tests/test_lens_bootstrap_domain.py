"""Pure bootstrap rules: host-spec expansion and its cap, pins, roles, OS, inventory, log tail."""

from __future__ import annotations

import tracemalloc

import pytest

from gpuplane_core.errors import GpuplaneError
from gpuplane_lens.domain.bootstrap import (
    Credentials,
    Node,
    NodeRow,
    append_tail,
    check_pins,
    expand_rows,
    fingerprint_matches,
    os_supported,
    parse_os_release,
    preflight_key,
    role_problems,
)
from gpuplane_lens.domain.hostspec import Target, expand, is_rfc1123_hostname
from gpuplane_lens.domain.inventory import ProxySettings, extended_no_proxy, render_inventory

FP_A = "SHA256:" + "A" * 43
FP_B = "SHA256:" + "B" * 43


def test_expand_forms() -> None:
    rows = [("10.0.0.10-12", 22), ("node-a, 10.0.0.250-10.0.1.1", 2222), ("Host.Example", 22)]
    out = expand(rows)
    assert [t.host for t in out[0]] == ["10.0.0.10", "10.0.0.11", "10.0.0.12"]
    assert [t.address for t in out[1]] == [
        "node-a:2222",
        "10.0.0.250:2222",
        *[f"10.0.0.{i}:2222" for i in range(251, 256)],
        "10.0.1.0:2222",
        "10.0.1.1:2222",
    ]
    assert out[2] == [Target("host.example", 22)]


def test_cap_is_checked_before_expansion_instantly() -> None:
    tracemalloc.start()
    with pytest.raises(GpuplaneError) as err:
        expand([("0.0.0.0-255.255.255.255", 22)])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert err.value.code == "too_many_hosts" and err.value.http_status == 400
    assert err.value.field == "nodes[0].host"
    assert peak < 1_000_000  # no list of 4 billion addresses was built (speed: bench_lens_hostspec)
    # The cap counts over all rows: 200 + 100 > 256.
    with pytest.raises(GpuplaneError):
        expand([("10.0.0.0-199", 22), ("10.0.1.0-99", 22)])
    assert len(expand([("10.0.0.0-10.0.0.255", 22)])[0]) == 256


@pytest.mark.parametrize(
    "spec", ["10.0.0.12-10", "10.0.0.1-300", "bad_host!", "10.0.0.1-10.0.x.1", "", " , "]
)
def test_invalid_specs(spec: str) -> None:
    with pytest.raises(GpuplaneError) as err:
        expand([(spec, 22)])
    assert err.value.code == "invalid_host_spec"


def test_duplicates_and_ports_refused() -> None:
    with pytest.raises(GpuplaneError):
        expand([("10.0.0.1", 22), ("10.0.0.0-2", 22)])
    with pytest.raises(GpuplaneError) as err:
        expand([("10.0.0.1", 0)])
    assert err.value.field == "nodes[0].port"


def _nodes() -> list[Node]:
    return expand_rows(
        [
            NodeRow("10.0.0.1", 22, ("control-plane",), "root"),
            NodeRow("10.0.0.2-3", 22, ("worker",), "ubuntu", Credentials(private_key="KEY")),
        ]
    )


def test_pins_must_equal_the_expanded_set() -> None:
    nodes = _nodes()
    pins = [("10.0.0.1", 22, FP_A), ("10.0.0.2", 22, FP_B), ("10.0.0.3", 22, FP_B)]
    assert len(check_pins(nodes, pins)) == 3
    for bad in (pins[:2], [*pins, ("10.0.0.4", 22, FP_A)], [*pins[:2], ("10.0.0.3", 2222, FP_A)]):
        with pytest.raises(GpuplaneError) as err:
            check_pins(nodes, bad)
        assert err.value.code == "host_key_pins_mismatch" and err.value.http_status == 400
    with pytest.raises(GpuplaneError) as err:
        check_pins(nodes, [*pins[:2], ("10.0.0.3", 22, "SHA256:short")])
    assert err.value.field == "hostKeys[2].fingerprint"


def test_fingerprint_compare() -> None:
    assert fingerprint_matches(FP_A, FP_A)
    assert not fingerprint_matches(FP_A, FP_B)
    assert not fingerprint_matches(FP_A, FP_A[:-1])


def test_roles() -> None:
    assert role_problems(_nodes()) == []
    workers = expand_rows([NodeRow("10.0.0.1-2", 22, ("worker",), "root")])
    assert "control-plane" in role_problems(workers)[0]
    two = expand_rows([NodeRow("10.0.0.1-2", 22, ("control-plane", "worker"), "root")])
    assert "odd" in role_problems(two)[0]


def test_hostname_and_os() -> None:
    assert is_rfc1123_hostname("node-a.example.com")
    for bad in ("Node_A", "-a", "a" * 64, "UPPER", ""):
        assert not is_rfc1123_hostname(bad)
    ok, detail = os_supported(parse_os_release('ID=ubuntu\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu 24.04"\n'))
    assert ok and detail == "Ubuntu 24.04"
    assert os_supported(parse_os_release("ID=debian\nVERSION_ID=12\n"))[0]
    assert os_supported(parse_os_release("ID=rocky\nVERSION_ID=9.4\n"))[0]
    assert not os_supported(parse_os_release("ID=ubuntu\nVERSION_ID=18.04\n"))[0]
    assert not os_supported(parse_os_release("ID=slackware\nVERSION_ID=15.0\n"))[0]
    assert not os_supported({})[0]


def test_preflight_key_covers_credentials_and_pins() -> None:
    nodes = _nodes()
    pins = {n.target: FP_A for n in nodes}
    key = preflight_key(nodes, pins)
    assert key == preflight_key(list(reversed(nodes)), pins)
    other = expand_rows(
        [
            NodeRow("10.0.0.1", 22, ("control-plane",), "root"),
            NodeRow("10.0.0.2-3", 22, ("worker",), "ubuntu", Credentials(private_key="OTHER")),
        ]
    )
    assert preflight_key(other, pins) != key
    assert preflight_key(nodes, {**pins, nodes[0].target: FP_B}) != key


def test_inventory_groups_and_proxy() -> None:
    nodes = expand_rows(
        [
            NodeRow("10.0.0.1", 22, ("control-plane", "worker"), "root"),
            NodeRow("10.0.0.2", 2222, ("worker",), "ubuntu", Credentials(password="secret")),
        ]
    )
    doc = render_inventory(
        nodes,
        key_files={"10-0-0-1": "/job/keys/10-0-0-1.key"},
        artifacts_dir="/job/artifacts",
        proxy=ProxySettings("http://proxy:3128", None, "10.0.0.0/8,.svc"),
    )
    all_ = doc["all"]
    assert all_["hosts"]["10-0-0-1"] == {
        "ansible_host": "10.0.0.1",
        "ansible_port": 22,
        "ansible_user": "root",
        "ip": "10.0.0.1",
        "access_ip": "10.0.0.1",
        "ansible_ssh_private_key_file": "/job/keys/10-0-0-1.key",
    }
    assert all_["hosts"]["10-0-0-2-2222"]["ansible_port"] == 2222
    assert "secret" not in repr(doc)  # passwords go to 0600 host_vars, never the inventory
    children = all_["children"]
    assert list(children["kube_control_plane"]["hosts"]) == ["10-0-0-1"]
    assert list(children["etcd"]["hosts"]) == ["10-0-0-1"]
    assert list(children["kube_node"]["hosts"]) == ["10-0-0-1", "10-0-0-2-2222"]
    assert set(children["k8s_cluster"]["children"]) == {"kube_control_plane", "kube_node"}
    assert all_["vars"]["http_proxy"] == "http://proxy:3128" and "https_proxy" not in all_["vars"]
    assert all_["vars"]["no_proxy"] == (
        "10.0.0.0/8,.svc,127.0.0.1,localhost,10.0.0.1,10-0-0-1,10.0.0.2,10-0-0-2-2222"
    )
    assert all_["vars"]["kubeconfig_localhost"] is True
    no_proxy_doc = render_inventory(nodes, key_files={}, artifacts_dir="/a")
    assert "http_proxy" not in no_proxy_doc["all"]["vars"] and "no_proxy" not in no_proxy_doc["all"]["vars"]
    assert extended_no_proxy(None, nodes[:1]) == "127.0.0.1,localhost,10.0.0.1,10-0-0-1"


def test_log_tail() -> None:
    tail = ""
    for i in range(5000):
        tail = append_tail(tail, f"line {i}\n", limit=32_000)
    assert len(tail) == 32_000 and tail.endswith("line 4999\n")
    assert append_tail("ab", "cd", limit=3) == "bcd"
