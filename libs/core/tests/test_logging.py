"""Logging setup: JSON shape, redaction of secrets, idempotence."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from gpuplane_core.logging import configure_logging, redact

JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlLXBhcnQ_-x"
BEARER = "s3cr3t-t0ken.abc~def"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAsecretkeymaterial\n-----END RSA PRIVATE KEY-----"


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """Restore the root logger afterwards so other tests see the process as they found it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield io.StringIO()
    root.handlers[:] = handlers
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_record_shape(stream: io.StringIO) -> None:
    configure_logging("INFO", True, "controller", stream=stream)
    logging.getLogger("gpuplane.test").info("pool %s ready", "a100", extra={"pool": "a100", "nodes": 4})
    logging.getLogger("gpuplane.test").debug("not shown at INFO")
    [record] = lines(stream)
    assert set(record) == {"ts", "level", "logger", "msg", "service", "pool", "nodes"}
    assert record["msg"] == "pool a100 ready"
    assert (record["level"], record["logger"], record["service"]) == ("INFO", "gpuplane.test", "controller")
    assert (record["pool"], record["nodes"]) == ("a100", 4)
    assert str(record["ts"]).endswith("Z")


def test_redacts_message_and_args(stream: io.StringIO) -> None:
    configure_logging("DEBUG", True, "lens", stream=stream)
    log = logging.getLogger("gpuplane.test")
    log.info("calling API with Authorization: Bearer %s", BEARER)
    log.info("service account jwt=%s", JWT)
    log.info("kubeconfig:\n  client-key-data: LS0tLS1CRUdJTiBSU0E=\n  token: abcd1234\n%s", PEM)
    output = stream.getvalue()
    for secret in (BEARER, JWT, "LS0tLS1CRUdJTiBSU0E=", "abcd1234", "secretkeymaterial"):
        assert secret not in output
    messages = [r["msg"] for r in lines(stream)]
    assert messages[0] == "calling API with Authorization: Bearer [REDACTED]"
    assert messages[1] == "service account jwt=[REDACTED]"
    assert "client-key-data: [REDACTED]" in str(messages[2])
    assert "token: [REDACTED]" in str(messages[2])


def test_redacts_extra_fields(stream: io.StringIO) -> None:
    configure_logging("INFO", True, "hypervisor", stream=stream)
    logging.getLogger("gpuplane.test").info(
        "request",
        extra={
            "headers": {"Authorization": f"Bearer {BEARER}", "Accept": "application/json"},
            "note": f"got {JWT} from the API",
            "token": "plain-opaque-value",
            "items": [f"Bearer {BEARER}"],
        },
    )
    output = stream.getvalue()
    assert BEARER not in output and JWT not in output and "plain-opaque-value" not in output
    [record] = lines(stream)
    assert record["headers"] == {"Authorization": "[REDACTED]", "Accept": "application/json"}
    assert record["note"] == "got [REDACTED] from the API"
    assert record["token"] == "[REDACTED]"
    assert record["items"] == ["Bearer [REDACTED]"]


def test_redacts_tracebacks(stream: io.StringIO) -> None:
    configure_logging("INFO", True, "gpuctl", stream=stream)
    try:
        raise ValueError(f"upstream rejected Bearer {BEARER}")
    except ValueError:
        logging.getLogger("gpuplane.test").exception("failed")
    [record] = lines(stream)
    assert "ValueError" in str(record["exc"])
    assert BEARER not in stream.getvalue()


def test_plain_text_is_redacted_too(stream: io.StringIO) -> None:
    configure_logging("INFO", False, "gpuctl", stream=stream)
    logging.getLogger("gpuplane.test").warning("token=%s", "abc123", extra={"jwt_seen": JWT})
    output = stream.getvalue()
    assert "WARNING" in output and "[gpuctl]" in output
    assert "abc123" not in output and JWT not in output


def test_idempotent(stream: io.StringIO) -> None:
    configure_logging("INFO", True, "controller", stream=stream)
    configure_logging("INFO", True, "controller", stream=stream)
    before = len(logging.getLogger().handlers)
    configure_logging("INFO", True, "controller", stream=stream)
    assert len(logging.getLogger().handlers) == before
    logging.getLogger("gpuplane.test").info("once")
    assert len(lines(stream)) == 1


def test_unknown_level_rejected(stream: io.StringIO) -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("LOUD", True, "controller", stream=stream)


@pytest.mark.parametrize(
    "text",
    ["bearer abc", 'x-token: "abc"', '{"access_token": "abc"}', "client_key_data=abc"],
)
def test_redact_patterns(text: str) -> None:
    assert "abc" not in redact(text)


@pytest.mark.parametrize("text", ["max_tokens: 5", "pool a100 has 8 GPUs", "eyJ alone is fine", "Bearer"])
def test_redact_leaves_ordinary_text(text: str) -> None:
    assert redact(text) == text
