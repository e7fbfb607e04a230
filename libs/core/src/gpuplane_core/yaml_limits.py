"""Bounded YAML (and JSON, a YAML subset) loading for documents users send.

PyYAML's SafeLoader builds only plain data, but on its own it accepts documents nested
thousands of levels deep (its composer recurses: RecursionError, a 500) and documents whose
aliases expand into billions of nodes ("billion laughs": cheap to load as shared references,
explosive for anything that walks or serialises the result). The limits are checked while
composing, before anything is constructed, so a hostile document is refused after reading
only its first offending part; every failure is an `InvalidSpec` naming `field`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from gpuplane_core.errors import InvalidSpec


@dataclass(frozen=True)
class YamlLimits:
    max_bytes: int = 1024 * 1024
    max_depth: int = 64
    max_aliases: int = 64
    max_nodes: int = 100_000
    """After expanding aliases."""


class _BoundedLoader(yaml.SafeLoader):
    limits: YamlLimits = YamlLimits()
    field: str = "body"

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > self.limits.max_aliases:
                raise InvalidSpec(f"YAML uses more than {self.limits.max_aliases} aliases", field=self.field)
        self._depth += 1
        if self._depth > self.limits.max_depth:
            raise InvalidSpec(f"YAML is nested deeper than {self.limits.max_depth} levels", field=self.field)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(node: Node, memo: dict[int, int], limit: int) -> int:
    """Node count with every alias expanded (a shared node counts at each use)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = limit + 1  # a recursive alias counts as too big
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
    memo[key] = size
    return size


def load_bounded(data: str | bytes, *, field: str = "body", limits: YamlLimits = YamlLimits()) -> Any:
    """One YAML or JSON document within `limits` (None for an empty document)."""
    if isinstance(data, bytes):
        if len(data) > limits.max_bytes:
            raise InvalidSpec(f"document exceeds {limits.max_bytes} bytes", field=field)
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidSpec("document is not UTF-8", field=field) from None
    elif len(data) > limits.max_bytes:  # characters, at least as many bytes
        raise InvalidSpec(f"document exceeds {limits.max_bytes} bytes", field=field)
    loader_cls = type("_Loader", (_BoundedLoader,), {"limits": limits, "field": field})
    loader = None
    try:
        loader = loader_cls(data)  # the reader refuses non-printable characters already here
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}, limits.max_nodes) > limits.max_nodes:
            raise InvalidSpec(f"YAML expands to more than {limits.max_nodes} nodes", field=field)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InvalidSpec(f"invalid YAML{where}: {e.problem or e.context}", field=field) from None
    except yaml.YAMLError:
        raise InvalidSpec("invalid YAML", field=field) from None
    except RecursionError:  # defence in depth: the depth limit stops composing long before
        raise InvalidSpec(f"YAML is nested deeper than {limits.max_depth} levels", field=field) from None
    finally:
        if loader is not None:
            loader.dispose()
