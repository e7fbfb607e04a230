"""InfluxDB line protocol (what GreptimeDB's and InfluxDB's write endpoints ingest)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

FieldValue = float | int | bool | str


@dataclass(frozen=True)
class Row:
    measurement: str
    tags: Mapping[str, str]
    fields: Mapping[str, FieldValue]
    timestamp_ns: int


def _escape_key(text: str) -> str:
    return text.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")


def _escape_measurement(text: str) -> str:
    return text.replace("\\", "\\\\").replace(",", "\\,").replace(" ", "\\ ")


def _field(value: FieldValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        # Positional digits of the shortest round-trip form: tiny costs stay exact without
        # an exponent some line-protocol parsers reject (2.7e-06 -> 0.0000027).
        return format(Decimal(repr(value)), "f")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def encode(row: Row) -> str:
    """One line; empty tag values and non-finite floats are omitted (line protocol cannot hold them)."""
    tags = "".join(f",{_escape_key(k)}={_escape_key(v)}" for k, v in sorted(row.tags.items()) if v)
    fields = ",".join(
        f"{_escape_key(k)}={_field(v)}"
        for k, v in row.fields.items()
        if not (isinstance(v, float) and not math.isfinite(v))
    )
    return f"{_escape_measurement(row.measurement)}{tags} {fields} {row.timestamp_ns}"


def encode_all(rows: list[Row]) -> str:
    return "".join(encode(r) + "\n" for r in rows)
