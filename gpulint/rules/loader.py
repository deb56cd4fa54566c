"""Reading a pack: YAML whose mappings know the line of each key, and the validator that turns a
value of the wrong kind into a PackError naming the file, the line, the key and what was expected.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml


class PackError(Exception):
    """A rule pack that does not validate; the message names file, line and key."""


class LineMap(dict[str, Any]):
    """A mapping that remembers the line of each key (1-based)."""

    line: int = 0
    lines: dict[str, int]


def _construct_map(loader: Any, node: yaml.MappingNode) -> LineMap:
    import yaml

    out = LineMap({str(k): v for k, v in loader.construct_mapping(node, deep=True).items()})
    out.line = node.start_mark.line + 1
    out.lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
    return out


@cache
def line_loader() -> Any:
    """yaml's safe loader whose mappings carry line numbers (libyaml's parser when present: 5x
    faster). Built on first use: yaml is imported only where a pack is parsed, not where a cached
    one is read (packcache.py)."""
    import yaml

    safe: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class LineLoader(safe):  # type: ignore[misc]
        pass

    LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
    return LineLoader


def load_yaml(text: str, where: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=line_loader())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise PackError(f"{where}{line}: not valid YAML: {getattr(e, 'problem', None) or e}") from None


class Validator:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, node: Any, key: str | None, expected: str) -> PackError:
        line = (
            node.lines.get(key, node.line)
            if isinstance(node, LineMap) and key is not None
            else getattr(node, "line", 0)
        )
        at = f":{line}" if line else ""
        what = f": `{key}`" if key is not None else ""  # file:line: `key`: expected ..., or file:line: expected ...
        return PackError(f"{self.where}{at}{what}: expected {expected}")

    def mapping(self, node: Any, key: str | None, parent: Any = None) -> LineMap:
        if not isinstance(node, LineMap):
            raise self.fail(parent if parent is not None else node, key, "a mapping")
        return node

    def keys(self, node: LineMap, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
        for k in required:
            if k not in node:
                raise self.fail(node, None, f"key `{k}`")
        for k in node:
            if k not in required and k not in optional and not str(k).startswith("x-"):
                raise self.fail(node, k, "one of: " + ", ".join(required + optional) + " (unknown key)")

    def typed(self, node: LineMap, key: str, kind: type | tuple[type, ...], expected: str) -> Any:
        v = node.get(key)
        if v is not None and (not isinstance(v, kind) or (kind is int and isinstance(v, bool))):
            raise self.fail(node, key, expected)
        return v

    def str_list(self, node: LineMap, key: str, allowed: set[str] | None = None) -> list[str]:
        v = node.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.fail(node, key, "a list of strings")
        if allowed is not None:
            for x in v:
                if x not in allowed:
                    raise self.fail(node, key, f"tensor types from the schema; `{x}` is not one")
        return v
