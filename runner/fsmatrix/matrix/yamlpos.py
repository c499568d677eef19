"""YAML loading that remembers the line of every mapping key and list item, for error messages."""

from __future__ import annotations

from typing import Any

import yaml


class LineDict(dict[str, Any]):
    """A mapping from YAML; ``key_lines[key]`` is the 1-based line of that key."""

    line: int = 0
    key_lines: dict[str, int]


class LineList(list[Any]):
    """A sequence from YAML; ``item_lines[i]`` is the 1-based line of item i."""

    line: int = 0
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    pass


def _mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    result = LineDict()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"keys must be strings, found {key!r}", key_node.start_mark
            )
        if key in result:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


MAX_NODES = 100_000  # values in the document once aliases are expanded


def _expanded_size(root: yaml.Node, limit: int) -> None:
    """Raise yaml.YAMLError when the document, with every alias expanded, has more than ``limit``
    nodes, or an alias refers to a node that contains it. Aliases share one node in the composed
    graph, so a "billion laughs" file is small here; every later walk over the data would not be."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise yaml.YAMLError(f"line {node.start_mark.line + 1}: an alias refers to a node that contains it")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        if total > limit:
            raise yaml.YAMLError(f"with its aliases expanded the document has more than {limit} values; refusing it")
        sizes[key] = total
        return total

    size(root)


def load(text: str, max_nodes: int | None = None) -> Any:
    """Parse YAML text; mappings become LineDict, sequences LineList. Raises yaml.YAMLError, also
    (with ``max_nodes``) for a document whose aliases expand it beyond that many values."""
    loader = _Loader(text)  # a SafeLoader subclass: no arbitrary objects
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if max_nodes is not None:
            _expanded_size(node, max_nodes)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def line_of(container: Any, key: str | int | None = None) -> int | None:
    """Line of ``container[key]`` (or of the container itself), when known."""
    if isinstance(container, LineDict):
        return container.key_lines.get(key, container.line) if isinstance(key, str) else container.line
    if isinstance(container, LineList):
        if isinstance(key, int) and 0 <= key < len(container.item_lines):
            return container.item_lines[key]
        return container.line
    return None
