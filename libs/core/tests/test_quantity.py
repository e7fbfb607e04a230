"""Kubernetes quantity parsing/formatting: known examples, rejections, and properties."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplane_core.errors import InvalidSpec
from gpuplane_core.quantity import (
    format_quantity,
    parse_non_negative_quantity,
    parse_quantity,
    to_bytes,
    to_milli,
)

# Multipliers computed independently of the module under test.
SUFFIX_FACTORS: dict[str, Fraction] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Decimal("0.5")),
        ("32Gi", Decimal(34359738368)),
        ("1.5T", Decimal(1500000000000)),
        ("100", Decimal(100)),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        ("0.1", Decimal("0.1")),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+3k", Decimal(3000)),
        ("-1Mi", Decimal(-1048576)),
        ("1E", Decimal(10**18)),
        ("2u", Decimal("0.000002")),
        ("7n", Decimal("0.000000007")),
        ("0", Decimal(0)),
    ],
)
def test_known_quantities(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("value", "binary", "expected"),
    [
        (Decimal("0.5"), False, "500m"),
        (Decimal(34359738368), True, "32Gi"),
        (Decimal(34359738368), False, "34359738368"),
        (Decimal(1500000000000), False, "1500G"),
        (Decimal(1000), False, "1k"),
        (Decimal(100), False, "100"),
        (Decimal("0.1"), True, "100m"),
        (Decimal(1500), True, "1500"),
        (Decimal(-1048576), True, "-1Mi"),
        (Decimal(0), False, "0"),
        (Decimal("1.5e-10"), False, "15e-11"),
    ],
)
def test_format_canonical(value: Decimal, binary: bool, expected: str) -> None:
    assert format_quantity(value, binary=binary) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1.2.3",
        "10Gib",
        "-",
        "+",
        "NaN",
        "inf",
        "Infinity",
        "Mi",
        "1e",
        "1e1.5",
        " 1",
        "1 ",
        "1_000",
        "0x10",
        "1K",
        "٣",
        "1" * 65,
    ],
)
def test_rejects_garbage(text: str) -> None:
    with pytest.raises(InvalidSpec, match="invalid quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), Decimal("NaN"), Decimal("-Infinity"), True, "1e99999", Decimal("1e999")],
)
def test_rejects_non_finite_and_out_of_range(value: str | float | Decimal) -> None:
    with pytest.raises(InvalidSpec):
        parse_quantity(value)


def test_rejection_message_is_bounded() -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_quantity("9" * 10_000)
    assert len(info.value.message) < 200


def test_numbers_are_exact() -> None:
    assert parse_quantity(0.1) == Decimal("0.1")
    assert parse_quantity(3) == Decimal(3)
    assert parse_quantity("0.1") + parse_quantity("0.2") == Decimal("0.3")


def test_non_negative() -> None:
    assert parse_non_negative_quantity("0") == 0
    assert parse_non_negative_quantity("2Gi") == 2 * 2**30
    with pytest.raises(InvalidSpec, match="negative"):
        parse_non_negative_quantity("-1m")


def test_to_bytes_and_milli_round_up() -> None:
    assert to_bytes("1.5") == 2
    assert to_bytes("1Ki") == 1024
    assert to_bytes("1500m") == 2
    assert to_bytes("-1.5") == -1
    assert to_milli("0.1") == 100
    assert to_milli("1n") == 1
    assert to_milli("2") == 2000
    assert to_milli("250m") == 250


mantissas = st.integers(min_value=-(10**15), max_value=10**15)
suffixes = st.sampled_from(sorted(SUFFIX_FACTORS))


@given(mantissas, suffixes)
def test_parse_matches_independent_arithmetic(mantissa: int, suffix: str) -> None:
    assert Fraction(parse_quantity(f"{mantissa}{suffix}")) == mantissa * SUFFIX_FACTORS[suffix]


@given(st.lists(st.tuples(mantissas, suffixes), min_size=2, max_size=20))
def test_ordering_preserved(items: list[tuple[int, str]]) -> None:
    texts = [f"{m}{s}" for m, s in items]
    exact = {t: m * SUFFIX_FACTORS[s] for t, (m, s) in zip(texts, items, strict=True)}
    assert sorted(texts, key=parse_quantity) == sorted(texts, key=exact.__getitem__)


decimals = st.decimals(
    allow_nan=False, allow_infinity=False, places=12, min_value=-(10**20), max_value=10**20
)


@given(decimals, st.booleans())
def test_round_trip_decimals(value: Decimal, binary: bool) -> None:
    text = format_quantity(value, binary=binary)
    assert parse_quantity(text) == value


@given(mantissas, suffixes, st.booleans())
def test_round_trip_suffixed(mantissa: int, suffix: str, binary: bool) -> None:
    value = parse_quantity(f"{mantissa}{suffix}")
    assert parse_quantity(format_quantity(value, binary=binary)) == value


@given(st.integers(min_value=1, max_value=2**20), st.sampled_from(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]))
def test_binary_format_uses_largest_binary_suffix(mantissa: int, suffix: str) -> None:
    text = format_quantity(parse_quantity(f"{mantissa}{suffix}"), binary=True)
    assert text[-2:] in {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
    assert int(text[:-2]) % 1024 != 0 or text.endswith("Ei")


@given(st.text(max_size=20))
def test_parse_only_raises_invalid_spec(text: str) -> None:
    try:
        value = parse_quantity(text)
    except InvalidSpec:
        return
    assert value.is_finite()
