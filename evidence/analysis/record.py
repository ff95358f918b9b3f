"""The base of the typed analysis (evidence.analysis.model): a dataclass that reads itself from, and writes
itself to, the dict analysis.json holds.

A record names the keys its readers use as fields; every other key of the dict rides along in `extra`, and
a named key the dict lacked is remembered (`unset`), so `to_dict()` gives back exactly the keys it was given:
analysis.json keeps its bytes while the model grows, and a field missing from an older analysis.json reads
as its default. A record built directly (not read) writes every field, except a field in `OMIT_NONE` left
None: the writer adds those keys only to some analyses (an arm spec, --until-decided, host telemetry).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import Any, ClassVar, TypeVar, Union

R = TypeVar("R", bound="Record")


class Record:
    """Mixin of the analysis' dataclasses; each ends with `extra: dict = extra_keys()` and `unset: frozenset[str] = unset_keys()`."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()
    extra: dict
    unset: frozenset[str]

    @classmethod
    def from_dict(cls: type[R], d: dict | None) -> R:
        d = d if isinstance(d, dict) else {}
        hints = _hints(cls)
        kw: dict[str, Any] = {}
        unset = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name in _OWN:
                continue
            if f.name in d:
                kw[f.name] = _read(hints[f.name], d[f.name])
            else:
                unset.append(f.name)
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kw["extra"] = {k: v for k, v in d.items() if k not in names or k in _OWN}
        kw["unset"] = frozenset(unset)
        return cls(**kw)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name in _OWN or f.name in self.unset:
                continue
            v = getattr(self, f.name)
            if v is None and f.name in self.OMIT_NONE:
                continue
            out[f.name] = _write(v)
        out.update(self.extra)
        return out


_OWN = ("extra", "unset")  # the record's own fields, never keys of analysis.json


def extra_keys() -> Any:
    """The `extra` field every record ends with: the keys of its dict that it does not name."""
    return dataclasses.field(default_factory=dict, repr=False, compare=False)


def unset_keys() -> Any:
    """The `unset` field: the named keys its dict lacked (an older analysis.json), not written back."""
    return dataclasses.field(default=frozenset(), repr=False, compare=False)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _read(tp: Any, v: Any) -> Any:
    """A JSON value as type `tp`: records (also in lists, dict values and `X | None`) become instances."""
    if v is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _read(inner[0], v) if len(inner) == 1 else v
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp.from_dict(v) if isinstance(v, dict) else v
    if origin is list and isinstance(v, list):
        (a,) = typing.get_args(tp) or (Any,)
        return [_read(a, x) for x in v] if _holds_record(a) else v
    if origin is dict and isinstance(v, dict):
        args = typing.get_args(tp)
        a = args[1] if len(args) == 2 else Any
        return {k: _read(a, x) for k, x in v.items()} if _holds_record(a) else v
    return v


def _holds_record(tp: Any) -> bool:
    """Whether values of type `tp` are records, or records at some depth (in a list, dict or `X | None`)."""
    if isinstance(tp, type) and issubclass(tp, Record):
        return True
    return any(_holds_record(a) for a in typing.get_args(tp))


def _write(v: Any) -> Any:
    if isinstance(v, Record):
        return v.to_dict()
    if isinstance(v, list):
        return [_write(x) for x in v]
    if isinstance(v, dict):
        return {k: _write(x) for k, x in v.items()}
    return v
