"""YAML loading that keeps source positions and refuses duplicate keys.

Plain loaders keep the last of two equal keys silently, which would let a typo
change an experiment unnoticed. We compose the node tree with PyYAML's safe
composer and build plain Python data ourselves, recording the line and column
of every key and value under its dotted path.

A spec is small (a few KB), so the reader is bounded: the file size, the nesting
depth, the number of values and the values reached through aliases (a 2 KB
"billion laughs" file would otherwise expand to gigabytes). Tags other than
YAML's plain types are refused rather than silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Path_ = tuple[Any, ...]

MAX_BYTES = 4 * 1024 * 1024  # the shipped specs are about 3 KB
MAX_DEPTH = 64  # nested mappings/lists; a spec needs about 5
MAX_NODES = 200_000  # values in the document as written
MAX_ALIAS_NODES = 10_000  # values reached again through aliases ('*name')
# The tags a spec may carry: YAML's plain types (written implicitly or as '!!str' etc.).
PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "merge")}


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


class _TooBig(Exception):
    def __init__(self, pos: Pos, message: str):
        self.pos, self.message = pos, message


# libyaml when present: ten times faster, and its event parser needs no recursion.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _prescan(text: str) -> None:
    """Walk the event stream (flat, no recursion) to refuse deep or huge documents before composing them."""
    depth = nodes = 0
    for ev in yaml.parse(text, Loader=_Loader):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _TooBig(_pos(ev.start_mark), f"nested more than {MAX_DEPTH} levels deep; a spec needs about 5")
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
            continue
        elif not isinstance(ev, yaml.ScalarEvent):
            continue
        nodes += 1
        if nodes > MAX_NODES:
            raise _TooBig(_pos(ev.start_mark), f"more than {MAX_NODES:,} values; a spec holds a few hundred")


def _tag(tag: str) -> str:
    return "!!" + tag[len("tag:yaml.org,2002:"):] if tag.startswith("tag:yaml.org,2002:") else tag


class _Builder:
    """Builds plain data from the node tree, counting what aliases re-expand and refusing cycles."""

    def __init__(self, out: Located):
        self.out = out
        self.seen: set[int] = set()
        self.open: set[int] = set()
        self.alias_nodes = 0
        self.constructor = yaml.constructor.SafeConstructor()

    def build(self, node: yaml.Node, path: Path_, via_alias: bool = False) -> Any:
        if id(node) in self.open:
            raise _TooBig(_pos(node.start_mark), "an alias refers to a value that contains it (a cycle)")
        via_alias = via_alias or id(node) in self.seen
        self.seen.add(id(node))
        if via_alias:
            self.alias_nodes += 1
            if self.alias_nodes > MAX_ALIAS_NODES:
                raise _TooBig(_pos(node.start_mark), f"aliases ('*name') expand to more than {MAX_ALIAS_NODES:,} values; "
                                                     "write the values out or use fewer aliases")
        if node.tag not in PLAIN_TAGS:
            self.out.problems.append((_pos(node.start_mark), path, f"YAML tag '{_tag(node.tag)}' is not allowed in a spec "
                                      "(only plain strings, numbers, booleans, null, mappings and lists)"))
            return None
        self.open.add(id(node))
        try:
            return _build(self, node, path, via_alias)
        finally:
            self.open.discard(id(node))


def _build(b: _Builder, node: yaml.Node, path: Path_, via_alias: bool) -> Any:
    out, problems = b.out, b.out.problems
    out.positions[path] = _pos(node.start_mark)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                problems.append((_pos(key_node.start_mark), path, "YAML merge keys ('<<') are not allowed in a spec; write the values out"))
                continue
            key = _scalar(b, key_node, path)
            if isinstance(key, (dict, list)) or key is None:
                problems.append((_pos(key_node.start_mark), path, "mapping keys must be plain scalars"))
                continue
            if key in result:
                first = out.key_positions.get(path + (key,))
                at = f" (first defined at line {first.line})" if first else ""
                problems.append((_pos(key_node.start_mark), path + (key,), f"duplicate key '{key}'{at}; a YAML loader would silently keep the last one"))
                continue
            out.key_positions[path + (key,)] = _pos(key_node.start_mark)
            result[key] = b.build(value_node, path + (key,), via_alias)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [b.build(item, path + (i,), via_alias) for i, item in enumerate(node.value)]
    return _scalar(b, node, path)


def _scalar(b: _Builder, node: yaml.Node, path: Path_) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        return {} if isinstance(node, yaml.MappingNode) else []
    if node.tag not in PLAIN_TAGS:
        b.out.problems.append((_pos(node.start_mark), path, f"YAML tag '{_tag(node.tag)}' is not allowed in a spec"))
        return None
    # SafeConstructor resolves the tag (int, float, bool, null, timestamp...) for us.
    try:
        return b.constructor.construct_object(node, deep=True)  # type: ignore[arg-type]
    except (ValueError, OverflowError) as exc:  # a 5,000-digit integer, a date like 2024-13-45
        b.out.problems.append((_pos(node.start_mark), path, f"cannot read this value: {str(exc).split(';')[0]}"))
        return None


def parse_yaml(text: str) -> Located:
    """Parse one YAML document into data with positions; raises YamlSourceError."""
    try:
        _prescan(text)
        # Composing recurses once per level: safe now that the depth is known to be small.
        nodes = list(yaml.compose_all(text, Loader=_Loader))
    except _TooBig as exc:
        raise YamlSourceError([(exc.pos, exc.message)]) from None
    except yaml.reader.ReaderError as exc:  # a control character: no mark, but a character offset
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise YamlSourceError([(Pos(line, col), f"character #x{exc.character:04x} is not allowed in YAML text")]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        msg = " ".join(s for s in (exc.context, exc.problem) if s) or "invalid YAML"
        if "maximum nesting depth" in msg:  # libyaml's own limit (1000 flow levels) can fire before ours
            raise YamlSourceError([(_pos(mark) if mark else None, f"nested more than {MAX_DEPTH} levels deep; "
                                    "a spec needs about 5")]) from None
        raise YamlSourceError([(_pos(mark) if mark else None, f"YAML syntax error: {msg}")]) from None
    except yaml.YAMLError as exc:  # pragma: no cover - non-marked errors are rare
        raise YamlSourceError([(None, f"YAML error: {exc}")]) from None
    if not nodes or nodes[0] is None:
        raise YamlSourceError([(None, "the file is empty; a spec is a YAML mapping with at least 'name', 'engine', 'model', 'workload' and 'sweep'")])
    if len(nodes) > 1:
        raise YamlSourceError([(_pos(nodes[1].start_mark), "the file holds several YAML documents ('---'); a spec is exactly one")])
    out = Located(data=None)
    try:
        out.data = _Builder(out).build(nodes[0], ())
    except _TooBig as exc:
        raise YamlSourceError([(exc.pos, exc.message)]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise YamlSourceError([(_pos(mark) if mark else None, f"YAML error: {getattr(exc, 'problem', exc)}")]) from None
    return out


def decode(data: bytes) -> str:
    """UTF-8 text of a spec file, or YamlSourceError naming the line of the first bad byte."""
    nul = data.find(b"\0")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = exc.start if nul < 0 else min(exc.start, nul)
    else:
        if nul < 0:
            return text
        bad = nul
    line = data.count(b"\n", 0, bad) + 1
    col = bad - (data.rfind(b"\n", 0, bad) + 1) + 1
    what = "a NUL byte" if bad == nul else f"byte 0x{data[bad]:02x}, which is not UTF-8"
    raise YamlSourceError([(Pos(line, col), f"{what}: a spec is UTF-8 text (is this a binary file?)")])


def read_yaml(path: Path) -> Located:
    with open(path, "rb") as f:
        # Read one byte past the limit: enough to know the file is too big without reading all of it.
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        size = Path(path).stat().st_size
        raise YamlSourceError([(None, f"the file is {size:,} bytes; a spec is at most {MAX_BYTES:,} bytes "
                                      "(the shipped ones are about 3 KB)")])
    return parse_yaml(decode(data))
