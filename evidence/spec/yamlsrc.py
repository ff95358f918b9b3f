"""YAML loading that keeps source positions and refuses duplicate keys.

Plain loaders keep the last of two equal keys silently, which would let a typo
change an experiment unnoticed. We compose the node tree with PyYAML's safe
composer and build plain Python data ourselves, recording the line and column
of every key and value under its dotted path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Path_ = tuple[Any, ...]


@dataclass(frozen=True)
class Pos:
    line: int  # 1-based
    column: int  # 1-based


@dataclass
class Located:
    """Data plus a map from each path (tuple of keys/indices) to its position."""

    data: Any
    positions: dict[Path_, Pos] = field(default_factory=dict)
    key_positions: dict[Path_, Pos] = field(default_factory=dict)
    # Problems that do not stop reading (duplicate keys...): (position, path, message).
    problems: list[tuple[Pos, Path_, str]] = field(default_factory=list)

    def where(self, path: Path_) -> Pos | None:
        """Position of the deepest existing prefix of path (keys before values)."""
        p = tuple(path)
        while True:
            if p in self.key_positions:
                return self.key_positions[p]
            if p in self.positions:
                return self.positions[p]
            if not p:
                return None
            p = p[:-1]


class YamlSourceError(Exception):
    """A YAML document that cannot be read: syntax, duplicates, wrong shape."""

    def __init__(self, problems: list[tuple[Pos | None, str]]):
        self.problems = problems
        super().__init__("; ".join(m for _, m in problems))


def _pos(mark: yaml.Mark) -> Pos:
    return Pos(mark.line + 1, mark.column + 1)


def _build(node: yaml.Node, path: Path_, out: Located, problems: list) -> Any:
    out.positions[path] = _pos(node.start_mark)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                problems.append((_pos(key_node.start_mark), path, "YAML merge keys ('<<') are not allowed in a spec; write the values out"))
                continue
            key = _scalar(key_node)
            if isinstance(key, (dict, list)) or key is None:
                problems.append((_pos(key_node.start_mark), path, "mapping keys must be plain scalars"))
                continue
            if key in result:
                first = out.key_positions.get(path + (key,))
                at = f" (first defined at line {first.line})" if first else ""
                problems.append((_pos(key_node.start_mark), path + (key,), f"duplicate key '{key}'{at}; a YAML loader would silently keep the last one"))
                continue
            out.key_positions[path + (key,)] = _pos(key_node.start_mark)
            result[key] = _build(value_node, path + (key,), out, problems)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), out, problems) for i, item in enumerate(node.value)]
    return _scalar(node)


def _scalar(node: yaml.Node) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        return {} if isinstance(node, yaml.MappingNode) else []
    # SafeConstructor resolves the tag (int, float, bool, null, timestamp...) for us.
    return yaml.SafeLoader("").construct_object(node, deep=True)  # type: ignore[arg-type]


def parse_yaml(text: str) -> Located:
    """Parse one YAML document into data with positions; raises YamlSourceError."""
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        msg = " ".join(s for s in (exc.context, exc.problem) if s) or "invalid YAML"
        raise YamlSourceError([(_pos(mark) if mark else None, f"YAML syntax error: {msg}")]) from None
    except yaml.YAMLError as exc:  # pragma: no cover - non-marked errors are rare
        raise YamlSourceError([(None, f"YAML error: {exc}")]) from None
    if not nodes or nodes[0] is None:
        raise YamlSourceError([(None, "the file is empty; a spec is a YAML mapping with at least 'name', 'engine', 'model', 'workload' and 'sweep'")])
    if len(nodes) > 1:
        raise YamlSourceError([(_pos(nodes[1].start_mark), "the file holds several YAML documents ('---'); a spec is exactly one")])
    out = Located(data=None)
    try:
        out.data = _build(nodes[0], (), out, out.problems)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise YamlSourceError([(_pos(mark) if mark else None, f"YAML error: {getattr(exc, 'problem', exc)}")]) from None
    return out


def read_yaml(path: Path) -> Located:
    text = Path(path).read_text(encoding="utf-8")
    return parse_yaml(text)
