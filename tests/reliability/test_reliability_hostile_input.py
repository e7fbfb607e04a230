"""Hostile YAML/JSON and names against every entry point that parses user input.

Every service runs as its console script (a real uvicorn server) on the devcluster. What must
hold for each hostile request: a 4xx in the service's documented error shape (`{"error"}`, or
problem+json for Lens) naming the offending field where there is one, an answer within seconds
(no parser blow-up), the server still alive, and its resident memory bounded (a 100 MB body or
a billion-laughs document must not be materialised).
"""

from __future__ import annotations

import json
import select
import socket
import time
from typing import Any

import httpx
import pytest
import yaml
from reliability_kit import DEEP, YAML_BOMBS, LoggedService

# No hostile request may take longer than this: a hang detector, not a performance target.
ANSWER_WITHIN_S = 10.0
# Growth of a server's RSS over the whole barrage (100 MB bodies included).
RSS_GROWTH_LIMIT = 64 * 1024 * 1024
HUNDRED_MB = 100 * 1024 * 1024


def assert_error(
    resp: httpx.Response, status: int | tuple[int, ...], *, problem: bool = False
) -> dict[str, Any]:
    wanted = (status,) if isinstance(status, int) else status
    assert resp.status_code in wanted, f"{resp.status_code} (want {wanted}): {resp.text[:300]}"
    body: dict[str, Any] = resp.json()
    if problem:
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert {"type", "status", "title", "detail", "code", "error"} <= set(body), body
        assert body["status"] == resp.status_code
    else:
        assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"], body
    assert len(resp.content) < 4096, "error answers stay small (no echo of the hostile input)"
    return body


def timed(fn: Any, *args: Any, **kw: Any) -> Any:
    started = time.monotonic()
    result = fn(*args, **kw)
    elapsed = time.monotonic() - started
    assert elapsed < ANSWER_WITHIN_S, f"answered after {elapsed:.1f}s"
    return result


def raw_request(
    url: str, method: str, path: str, total: int, *, chunked: bool, content_type: str, prefix: bytes = b""
) -> tuple[int, bytes]:
    """Send a `total`-byte body (declared, or chunked without a length) and return the answer,
    stopping as soon as the server answers: a server that buffers everything never does."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=ANSWER_WITHIN_S)
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n"
    head += "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {total}\r\n"
    sock.sendall((head + "\r\n").encode())
    chunk = b"x" * 65536
    pending = prefix
    sent = 0
    deadline = time.monotonic() + ANSWER_WITHIN_S
    answer = b""
    try:
        while time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock] if sent < total else [], [], 1.0)
            if readable:
                break
            if writable:
                data, pending = (pending or chunk), b""
                sock.sendall(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                sent += len(data)
                if chunked and sent >= total:
                    sock.sendall(b"0\r\n\r\n")
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _content_length(answer):
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        sock.close()
    assert answer, f"no answer after sending {sent} bytes"
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]


def _content_length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


# -- YAML / JSON bombs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bomb", sorted(YAML_BOMBS))
def test_yaml_bombs_are_refused_fast(services: dict[str, LoggedService], bomb: str) -> None:
    text = YAML_BOMBS[bomb]
    gpuctl, controller, lens = services["gpuctl"], services["controller"], services["lens"]
    with httpx.Client(timeout=ANSWER_WITHIN_S * 2) as http:
        # gpuctl: jobs, batch and quotas take YAML inside JSON.
        for path, body in (
            ("/api/v1/jobs", {"yamlContent": text}),
            ("/api/v1/jobs/batch", {"yamlContents": [text]}),
            ("/api/v1/quotas", {"yamlContent": text}),
        ):
            resp = timed(http.post, gpuctl.url + path, json=body)
            if path.endswith("batch"):  # per-item results: the item fails, the batch answers
                assert resp.status_code in (201, 400), resp.text[:300]
                if resp.status_code == 201:
                    assert not resp.json()["success"], resp.text[:300]
                continue
            assert_error(resp, 400)
        # controller: the Pod manifest is the raw body.
        resp = timed(http.post, controller.url + "/api/simulate-schedule", content=text.encode())
        assert_error(resp, 400)
        # lens: the kubeconfig upload.
        resp = timed(
            http.post,
            lens.url + "/api/cluster/clusters",
            data={"name": "bomb"},
            files={"file": ("kubeconfig", text.encode())},
        )
        body = assert_error(resp, 422, problem=True)
        assert body["code"] == "invalid_kubeconfig"
    for svc in services.values():
        assert svc.alive() and svc.ready()


def test_deeply_nested_json_bodies(services: dict[str, LoggedService]) -> None:
    """Nesting in the JSON body itself (not in a YAML string): parsed by the framework."""
    deep = '{"yamlContent": "x", "extra": ' + "[" * DEEP + "]" * DEEP + "}"
    with httpx.Client(timeout=ANSWER_WITHIN_S * 2) as http:
        resp = timed(
            http.post,
            services["gpuctl"].url + "/api/v1/jobs",
            content=deep,
            headers={"content-type": "application/json"},
        )
        assert_error(resp, 400)
        resp = timed(
            http.post,
            services["hypervisor"].url + "/api/v1/trap",
            content='{"device_uuid": ' + "[" * DEEP + "]" * DEEP + "}",
            headers={"content-type": "application/json"},
        )
        assert_error(resp, 400)
        resp = timed(
            http.patch,
            services["lens"].url + "/api/cluster/clusters/some-id",
            content='{"proxy": ' + "[" * DEEP + "]" * DEEP + "}",
            headers={"content-type": "application/json"},
        )
        # FastAPI's own "error parsing the body" (400), in Lens's problem shape.
        assert_error(resp, 400, problem=True)


@pytest.mark.parametrize(
    "text", ["kind: training\njob: \x89", "lone \udb78 surrogate", "a: \x00"], ids=["c1", "surrogates", "nul"]
)
def test_unprintable_yaml_is_refused(services: dict[str, LoggedService], text: str) -> None:
    """Characters YAML forbids are refused by PyYAML's reader before parsing even starts (found
    by the fuzzer: gpuctl answered 500 until the reader's error was caught)."""
    body = json.dumps({"yamlContent": text})  # lone surrogates stay \u-escaped in the JSON text
    with httpx.Client(timeout=ANSWER_WITHIN_S * 2) as http:
        for path in ("/api/v1/jobs", "/api/v1/quotas"):
            resp = timed(
                http.post,
                services["gpuctl"].url + path,
                content=body,
                headers={"content-type": "application/json"},
            )
            assert "invalid YAML" in assert_error(resp, 400)["error"]
        resp = timed(
            http.post,
            services["controller"].url + "/api/simulate-schedule",
            content=text.encode("utf-8", "surrogatepass"),
        )
        assert_error(resp, 400)


# -- 100 MB bodies -------------------------------------------------------------------------------------------

# A valid start, so the body is refused for its size and not for a syntax error in its first bytes.
MULTIPART_START = b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="kubeconfig"\r\n\r\n'
BIG_BODY_TARGETS = [
    ("gpuctl", "POST", "/api/v1/jobs", "application/json", b'{"yamlContent": "'),
    ("controller", "POST", "/api/simulate-schedule", "application/yaml", b"kind: Pod\nspec: "),
    ("hypervisor", "POST", "/api/v1/trap", "application/json", b'{"device_uuid": "'),
    ("lens", "POST", "/api/cluster/clusters", "multipart/form-data; boundary=xyz", MULTIPART_START),
]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_hundred_mb_bodies_get_413_without_buffering(
    services: dict[str, LoggedService], chunked: bool
) -> None:
    before = {name: svc.rss_bytes() for name, svc in services.items()}
    for name, method, path, content_type, prefix in BIG_BODY_TARGETS:
        svc = services[name]
        status, body = timed(
            raw_request,
            svc.url,
            method,
            path,
            HUNDRED_MB,
            chunked=chunked,
            content_type=content_type,
            prefix=prefix,
        )
        assert status == 413, f"{name} {path}: {status} {body[:200]!r}"
        doc = json.loads(body)
        assert "exceeds" in doc["error"], doc
        if name == "lens":
            assert doc["code"] == "payload_too_large" and doc["status"] == 413
        assert svc.alive() and svc.ready(), name
    for name, svc in services.items():
        grown = svc.rss_bytes() - before[name]
        assert grown < RSS_GROWTH_LIMIT, f"{name} RSS grew by {grown / 2**20:.0f} MiB"


def test_memory_stays_bounded_over_repeated_bombs(services: dict[str, LoggedService]) -> None:
    """Rounds of every bomb: RSS does not climb with the number of hostile requests."""
    before = {name: svc.rss_bytes() for name, svc in services.items()}
    with httpx.Client(timeout=ANSWER_WITHIN_S * 2) as http:
        for _ in range(2):
            for text in YAML_BOMBS.values():
                http.post(services["gpuctl"].url + "/api/v1/jobs", json={"yamlContent": text})
                http.post(services["controller"].url + "/api/simulate-schedule", content=text.encode())
                http.post(
                    services["lens"].url + "/api/cluster/clusters",
                    data={"name": "bomb"},
                    files={"file": ("kubeconfig", text.encode())},
                )
    for name, svc in services.items():
        grown = svc.rss_bytes() - before[name]
        assert grown < RSS_GROWTH_LIMIT, f"{name} RSS grew by {grown / 2**20:.0f} MiB"


# -- Lens kubeconfig encodings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xfe\x00k\x00i\x00n\x00d",  # UTF-16 with a BOM
        "kind: Config\nclusters: [{name: c, cluster: {server: https://é}}]\n".encode("latin-1"),
        b"\x00" * 64,
        b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
    ],
    ids=["utf16", "latin1", "nul-bytes", "binary"],
)
def test_non_utf8_kubeconfig_is_invalid_kubeconfig(services: dict[str, LoggedService], data: bytes) -> None:
    with httpx.Client(timeout=ANSWER_WITHIN_S * 2) as http:
        resp = timed(
            http.post,
            services["lens"].url + "/api/cluster/clusters",
            data={"name": "enc"},
            files={"file": ("kubeconfig", data)},
        )
    body = assert_error(resp, 422, problem=True)
    assert body["code"] == "invalid_kubeconfig"


# -- path traversal in names ----------------------------------------------------------------------

TRAVERSALS = ["../../etc/passwd", "..%2F..%2Fkube-system", "a/../../b", "..", "%2e%2e", "x\x00y"]


def _job_yaml(name: str) -> str:
    return yaml.safe_dump(
        {
            "kind": "training",
            "version": "v0.1",
            "job": {"name": name, "priority": "medium"},
            "environment": {"image": "busybox", "command": ["true"]},
            "resources": {"pool": "default", "gpu": 0, "cpu": 1, "memory": "1Gi"},
        }
    )


@pytest.mark.parametrize("name", TRAVERSALS)
def test_path_traversal_in_names(services: dict[str, LoggedService], name: str) -> None:
    from urllib.parse import quote

    gpuctl, lens, hypervisor = services["gpuctl"], services["lens"], services["hypervisor"]
    q = quote(name, safe="")
    with httpx.Client(timeout=ANSWER_WITHIN_S * 2) as http:
        # As a path segment: never a 5xx, never another object.
        for url in (
            f"{gpuctl.url}/api/v1/jobs/{q}",
            f"{gpuctl.url}/api/v1/jobs/x?namespace={q}",
            f"{gpuctl.url}/api/v1/nodes/{q}",
            f"{gpuctl.url}/api/v1/quotas/{q}",
            f"{gpuctl.url}/api/v1/namespaces/{q}",
            f"{gpuctl.url}/api/v1/pools/{q}",
            f"{lens.url}/api/cluster/clusters/{q}/kubernetes-version",
            f"{lens.url}/api/cluster/session?clusterId={q}",
            f"{hypervisor.url}/api/v1/workers/{q}",
            f"{hypervisor.url}/api/v1/devices/{q}",
        ):
            resp = timed(http.get, url)
            assert resp.status_code in (400, 404, 422), f"{url}: {resp.status_code} {resp.text[:200]}"
            if resp.headers.get("content-type", "").startswith(("application/json", "application/problem")):
                assert "error" in resp.json()
        for url in (f"{gpuctl.url}/api/v1/jobs/{q}", f"{gpuctl.url}/api/v1/quotas/{q}"):
            resp = timed(http.delete, url)
            assert resp.status_code in (400, 404), f"DELETE {url}: {resp.status_code} {resp.text[:200]}"
        # As a name inside a document: refused as invalid, naming the field.
        resp = timed(http.post, gpuctl.url + "/api/v1/jobs", json={"yamlContent": _job_yaml(name)})
        body = assert_error(resp, 400)
        assert "name" in body["error"], body


@pytest.fixture(scope="module")
def lens_cluster(services: dict[str, LoggedService]) -> str:
    """A draft cluster in Lens (its server unreachable: only the validation is exercised)."""
    kubeconfig = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).encode()
    resp = httpx.post(
        services["lens"].url + "/api/cluster/clusters",
        data={"name": "traversal", "draft": "true"},
        files={"file": ("kubeconfig", kubeconfig)},
        timeout=30,
    )
    assert resp.status_code == 201, resp.text
    return str(resp.json()["cluster"]["id"])


@pytest.mark.parametrize("name", TRAVERSALS)
def test_path_traversal_in_lens_secret_names(
    services: dict[str, LoggedService], lens_cluster: str, name: str
) -> None:
    url = f"{services['lens'].url}/api/cluster/clusters/{lens_cluster}/hf-token-secrets"
    with httpx.Client(timeout=ANSWER_WITHIN_S * 2) as http:
        for body, field in (
            ({"namespace": "default", "name": name, "token": "hf_x"}, "name"),
            ({"namespace": name, "name": "hf", "token": "hf_x"}, "namespace"),
        ):
            resp = timed(http.post, url, json=body)
            problem = assert_error(resp, 422, problem=True)
            assert problem["code"] == "invalid_secret_ref" and field in problem["detail"], problem


# -- label limits (Kubernetes: prefix <= 253, name <= 63, value <= 63) ---------------------------------------


async def test_label_keys_and_values_at_and_over_the_limits(
    services: dict[str, LoggedService], make_gpu_nodes: Any
) -> None:
    (node,) = await make_gpu_nodes(1, wait_ready=False)
    prefix_253 = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
    assert len(prefix_253) == 253
    at_limit = [
        ("n" * 63, "v"),
        (f"{prefix_253}/k", "v"),
        ("k63", "v" * 63),
        ("empty-value", ""),
    ]
    over = [
        ("n" * 64, "v", "key"),
        (f"{prefix_253}x/k", "v", "key"),
        ("k64", "v" * 64, "value"),
        ("bad/../key", "v", "key"),
        ("k", "-starts-with-dash", "value"),
        ("k" * 100_000, "v", "key"),
    ]
    url = f"{services['gpuctl'].url}/api/v1/nodes/{node}/labels"
    async with httpx.AsyncClient(timeout=ANSWER_WITHIN_S * 2) as http:
        for key, value in at_limit:
            resp = await http.post(url, json={"key": key, "value": value})
            assert resp.status_code == 201, f"{key[:20]}...={value[:10]}: {resp.text[:300]}"
        for key, value, field in over:
            resp = await http.post(url, json={"key": key, "value": value})
            body = assert_error(resp, 400)
            assert body["error"].startswith(f"{field}:"), body
        labels = (await http.get(url)).json()
        text = json.dumps(labels)
        assert f"{prefix_253}/k" in text and "v" * 63 in text and "v" * 64 not in text
