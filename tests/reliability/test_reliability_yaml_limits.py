"""The bounded YAML loader every service can use for user documents (gpuplane_core.yaml_limits)."""

from __future__ import annotations

import pytest
import yaml
from reliability_kit import YAML_BOMBS

from gpuplane_core.errors import InvalidSpec
from gpuplane_core.yaml_limits import YamlLimits, load_bounded


@pytest.mark.parametrize("bomb", sorted(YAML_BOMBS))
def test_bombs_are_invalid_spec_naming_the_field(bomb: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        load_bounded(YAML_BOMBS[bomb], field="file")
    assert err.value.field == "file" and err.value.http_status == 400


def test_few_aliases_that_expand_hugely_are_refused() -> None:
    # 6 aliases, each level 40 wide: 40**6 nodes once expanded.
    lines = ['l0: &l0 ["x"' + ',"x"' * 39 + "]"]
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 40) + "]" for i in range(1, 6)]
    with pytest.raises(InvalidSpec, match="expands to more than"):
        load_bounded("\n".join(lines), limits=YamlLimits(max_aliases=1000))


def test_ordinary_documents_load() -> None:
    doc = {"kind": "Pod", "spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}]}}
    assert load_bounded(yaml.safe_dump(doc)) == doc
    assert load_bounded(b'{"a": [1, 2, {"b": null}]}') == {"a": [1, 2, {"b": None}]}
    assert load_bounded("base: &b {x: 1}\nuse: *b\n") == {"base": {"x": 1}, "use": {"x": 1}}
    assert load_bounded("") is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe\x00", "not UTF-8"),
        ("a: \x89", "invalid YAML"),
        ("a: [", "invalid YAML at line 1"),
        ("*nothing", "undefined alias"),
        ("a: 1\n---\nb: 2\n", "invalid YAML"),
        ("x" * (1024 * 1024 + 1), "exceeds"),
    ],
    ids=["utf16-bytes", "non-printable", "unclosed", "undefined-alias", "two-documents", "over-1MiB"],
)
def test_malformed_documents(data: str | bytes, message: str) -> None:
    with pytest.raises(InvalidSpec, match=message):
        load_bounded(data)
