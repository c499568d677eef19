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


def load(text: str) -> Any:
    """Parse YAML text; mappings become LineDict, sequences LineList. Raises yaml.YAMLError."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects


def line_of(container: Any, key: str | int | None = None) -> int | None:
    """Line of ``container[key]`` (or of the container itself), when known."""
    if isinstance(container, LineDict):
        return container.key_lines.get(key, container.line) if isinstance(key, str) else container.line
    if isinstance(container, LineList):
        if isinstance(key, int) and 0 <= key < len(container.item_lines):
            return container.item_lines[key]
        return container.line
    return None
