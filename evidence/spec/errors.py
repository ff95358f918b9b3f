"""Turning pydantic's errors into located, one-line problems: file:line:col, dotted field, message.

Kept apart from the models so that model.py holds the spec's meaning and this module
its error plumbing. Nothing here knows the spec's fields: the root model class is
passed in.
"""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from evidence.spec.yamlsrc import Located, Pos


class SpecError(Exception):
    """All problems found in a spec file, each located; rendered without a traceback."""

    def __init__(self, file: str, problems: list[tuple[Pos | None, str, str]]):
        self.file = file
        self.problems = problems  # (position, dotted field path, message)
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"{self.file}: {len(self.problems)} problem(s) in the spec:"]
        for pos, field, msg in self.problems:
            where = f"{self.file}:{pos.line}:{pos.column}" if pos else self.file
            lines.append(f"  {where}: {field or '<top>'}: {msg}")
        return "\n".join(lines)

    def as_json(self) -> list[dict[str, Any]]:
        return [
            {"file": self.file, "line": p.line if p else None, "column": p.column if p else None, "field": f, "message": m}
            for p, f, m in self.problems
        ]


def dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def models_in(ann: Any) -> list[type[BaseModel]]:
    """The model classes inside an annotation, through Optional, Union and Annotated."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    out: list[type[BaseModel]] = []
    for a in typing.get_args(ann):
        out.extend(models_in(a))
    return out


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """Walk the model classes along a loc to find the model that owns the last key."""
    cls: Any = root
    for part in loc[:-1]:
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            return None
        f = cls.model_fields.get(part) if isinstance(part, str) else None
        if f is None:
            return None
        cands = models_in(f.annotation)
        if not cands:
            return None
        cls = cands[0]
    return cls if isinstance(cls, type) and issubclass(cls, BaseModel) else None


def _clean_loc(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """Keep the parts of a pydantic loc that are data keys; drop union-branch tags.

    A key that is absent from the data (a missing field, say) is kept if it looks
    like a field name; after it there is no data to follow.
    """
    out: list[Any] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
            out.append(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            out.append(part)
        elif isinstance(part, str) and re.fullmatch(r"[a-z_][a-z0-9_]*", part) and part not in ("dict", "list", "str", "int", "float", "bool"):
            out.append(part)
            node = None
        # anything else (e.g. 'PromptsMultiple', 'dict[int,int]', "literal['inf']") is a union tag
    return tuple(out)


def _short(value: Any) -> str:
    # A huge input (a 10,000-item list, say) must not turn into a huge message.
    r = repr(value)
    return r if len(r) <= 80 else r[:77] + "..."


def _message(root: type[BaseModel], err: dict[str, Any], loc: tuple[Any, ...], no_echo: frozenset[str] = frozenset()) -> str:
    t = err["type"]
    if t == "extra_forbidden":
        model = _model_at(root, loc)
        known = sorted(model.model_fields) if model else []
        guess = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = f"; did you mean '{guess[0]}'?" if guess else (f"; known keys here: {', '.join(known)}" if known else "")
        return f"unknown key '{loc[-1]}'{hint}"
    if t == "missing":
        return "required field is missing"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if t == "finite_number":
        msg = "must be a finite number (.inf and .nan are not allowed here)"
    inp = err.get("input")
    # A value under a secret-bearing key (an API key pasted by mistake) is never repeated back.
    if not isinstance(inp, (dict, list)) and "input" in err and not no_echo.intersection(map(str, loc)):
        return f"{msg} (got {_short(inp)})"
    return msg


def _split_located(root: type[BaseModel], err: dict[str, Any], base: tuple[Any, ...],
                   no_echo: frozenset[str]) -> list[tuple[tuple[Any, ...], str]]:
    """Model validators tag each problem '@rel.path: text' (one per line) to name its field."""
    msg = err["msg"]
    if err["type"] != "value_error" or "@" not in msg:
        return [(base, _message(root, err, base, no_echo))]
    body = msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
    out = []
    for line in body.split("\n"):
        m = re.match(r"^@([\w.]+): (.*)$", line, re.S)
        if not m:
            out.append((base, line))
            continue
        rel = tuple(int(p) if p.isdigit() else p for p in m.group(1).split("."))
        # Spec-level rules give absolute paths; section-level ones are relative.
        loc = rel if not base else base + rel
        out.append((loc, m.group(2)))
    return out


def validate_located(root: type[BaseModel], src: Located, file: str, no_echo: frozenset[str] = frozenset()) -> Any:
    """Validate src.data against root; raise SpecError with every problem located in the file.

    no_echo: keys whose offending values are never quoted in a message (they may hold secrets)."""
    if not isinstance(src.data, dict):
        kind = type(src.data).__name__ if src.data is not None else "nothing"
        raise SpecError(file, [(src.where(()), "", f"a spec is a YAML mapping of sections, but the file holds a {kind}")])
    problems: list[tuple[Pos | None, str, str]] = [(pos, dotted(path), msg) for pos, path, msg in src.problems]
    # A value the reader already refused (a tag, say) gets no second, derived complaint from validation.
    refused = {tuple(path) for _, path, _ in src.problems}
    result = None
    try:
        result = root.model_validate(src.data)
    except ValidationError as exc:
        seen = set()
        for err in exc.errors():
            base = _clean_loc(tuple(err["loc"]), src.data)
            if any(base[:len(r)] == r for r in refused if r):
                continue
            for loc, msg in _split_located(root, err, base, no_echo):
                key = (loc, msg)
                if key in seen:
                    continue
                seen.add(key)
                problems.append((src.where(loc), dotted(loc), msg))
    if problems:
        problems.sort(key=lambda p: ((p[0].line, p[0].column) if p[0] else (0, 0), p[1]))
        raise SpecError(file, problems) from None
    return result
