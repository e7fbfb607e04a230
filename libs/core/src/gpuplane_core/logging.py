"""Process-wide logging: one-line JSON (or plain text) on stderr, with secrets redacted.

Services talk to the Kubernetes API with bearer tokens and kubeconfigs, and a
stray ``logger.debug(headers)`` must not leak them, so redaction runs on the
handler (it sees every record that reaches the root logger, whichever logger
emitted it) over the message, its arguments, ``extra=`` fields and tracebacks.

Run uvicorn with ``log_config=None`` so its loggers keep propagating here.
"""

from __future__ import annotations

import json as jsonlib
import logging
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

REDACTED = "[REDACTED]"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # PEM private keys, including truncated ones (no END line).
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S
        ),
        REDACTED,
    ),
    (re.compile(r"\b(bearer)\s+[A-Za-z0-9\-._~+/]+=*", re.I), rf"\1 {REDACTED}"),
    # JWTs: base64url(JSON header) always starts with "eyJ" ('{"').
    (re.compile(r"\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"), REDACTED),
    # kubeconfig / JSON / query-string style "key: value" pairs.
    (
        re.compile(
            r"""([\w-]*(?:token|client[-_]?key[-_]?data|password)["']?\s*[:=]\s*["']?)[^\s"',;&}]+""", re.I
        ),
        rf"\1{REDACTED}",
    ),
)

# extra=/dict keys whose whole value is masked, e.g. "token", "serviceAccountToken", "client-key-data".
_SENSITIVE_KEY_SUFFIXES = (
    "token",
    "password",
    "authorization",
    "secret",
    "apikey",
    "api_key",
    "keydata",
    "key-data",
    "key_data",
)

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's ANSI-coloured copy of the message
}


def redact(text: str) -> str:
    """Mask bearer tokens, JWTs, PEM private keys and ``token:``-style values in ``text``."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _sensitive(key: object) -> bool:
    return isinstance(key, str) and key.lower().endswith(_SENSITIVE_KEY_SUFFIXES)


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: REDACTED if _sensitive(k) else _redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(v) for v in value]
    return value


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _RESERVED and not k.startswith("_")}


class RedactionFilter(logging.Filter):
    """Rewrites the record in place; never drops it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # bad %-args: keep the record rather than raise from logger.info
            message = f"{record.msg} {record.args!r}"
        record.msg = redact(message)
        record.args = None
        for key, value in _extras(record).items():
            setattr(record, key, REDACTED if _sensitive(key) else _redact_value(value))
        return True


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", "service", **extras, "exc"?}`` on one line (UTC, ms)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "service": self.service,
        }
        for key, value in _extras(record).items():
            entry.setdefault(key, value)  # an extra never overwrites the fixed fields
        if record.exc_info:
            entry["exc"] = redact(self.formatException(record.exc_info))
        if record.stack_info:
            entry["stack"] = redact(self.formatStack(record.stack_info))
        return jsonlib.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Human-readable ``ts LEVEL logger [service] msg key=value ...`` for local runs."""

    def __init__(self, service: str) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s [" + service + "] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = " ".join(f"{k}={v!r}" for k, v in _extras(record).items())
        text = f"{line} {extras}" if extras else line
        return redact(text) if record.exc_info or record.stack_info else text


class _GpuplaneHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marker type so a second ``configure_logging`` replaces rather than duplicates it."""


def configure_logging(level: str, json: bool, service: str, *, stream: TextIO | None = None) -> None:
    """Configure the root logger once per process; calling again replaces the previous setup."""
    numeric = logging.getLevelNamesMapping().get(level.strip().upper())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _GpuplaneHandler)]:
        root.removeHandler(old)
        old.close()
    handler = _GpuplaneHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(RedactionFilter())
    handler.setFormatter(JsonFormatter(service) if json else TextFormatter(service))
    root.addHandler(handler)
    root.setLevel(numeric)
    # uvicorn installs its own handlers when given a log config; route everything through ours.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uv_logger = logging.getLogger(name)
        uv_logger.handlers.clear()
        uv_logger.propagate = True
