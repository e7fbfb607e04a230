"""Safe, bounded YAML loading for job documents.

PyYAML's SafeLoader builds only plain data, but on its own it still accepts
documents that are huge, nested thousands of levels deep (stack exhaustion) or
that expand through aliases into billions of nodes ("billion laughs"). The
limits below are checked while composing, before anything is constructed, so a
hostile document is refused after reading only its first offending part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpuplane_core.errors import InvalidSpec


@dataclass(frozen=True)
class YamlLimits:
    max_bytes: int = 256 * 1024
    max_depth: int = 32
    max_aliases: int = 32
    max_nodes: int = 20_000  # after expanding aliases


DEFAULT_LIMITS = YamlLimits()


class _BoundedLoader(yaml.SafeLoader):
    limits: YamlLimits = DEFAULT_LIMITS

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > self.limits.max_aliases:
                raise InvalidSpec(f"YAML uses more than {self.limits.max_aliases} aliases")
        self._depth += 1
        if self._depth > self.limits.max_depth:
            raise InvalidSpec(f"YAML is nested deeper than {self.limits.max_depth} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(node: Node, memo: dict[int, int], limit: int) -> int:
    """Node count with every alias expanded (shared nodes counted at each use)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = limit + 1  # a cycle (recursive alias) counts as too big
    size = 1
    if isinstance(node, SequenceNode):
        for child in node.value:
            size += _expanded_size(child, memo, limit)
            if size > limit:
                break
    elif isinstance(node, MappingNode):
        for k, v in node.value:
            size += _expanded_size(k, memo, limit) + _expanded_size(v, memo, limit)
            if size > limit:
                break
    elif not isinstance(node, ScalarNode):  # pragma: no cover - PyYAML has no other node kinds
        raise InvalidSpec("unsupported YAML node")
    memo[key] = size
    return size


def load_document(text: str, limits: YamlLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Parse one YAML (or JSON) document that must be a mapping, within `limits`."""
    if len(text.encode("utf-8", errors="replace")) > limits.max_bytes:
        raise InvalidSpec(f"YAML document exceeds {limits.max_bytes} bytes")
    loader_cls = type("_Loader", (_BoundedLoader,), {"limits": limits})
    try:
        # The reader refuses non-printable characters already here, in the constructor.
        loader = loader_cls(text)
    except yaml.YAMLError as e:
        raise InvalidSpec(f"invalid YAML: {e}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise InvalidSpec("YAML document is empty")
        if _expanded_size(node, {}, limits.max_nodes) > limits.max_nodes:
            raise InvalidSpec(f"YAML expands to more than {limits.max_nodes} nodes")
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InvalidSpec(f"invalid YAML{where}: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise InvalidSpec(f"invalid YAML: {e}") from None
    except RecursionError:
        raise InvalidSpec(f"YAML is nested deeper than {limits.max_depth} levels") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise InvalidSpec("YAML document must be a mapping with kind, version, job, ...")
    return data
