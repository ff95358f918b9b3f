"""A typed reading of analysis.json: what report, figures and compare read, by attribute instead of string key.

Introduced on the reading side: `compute_analysis` still builds the dict that is written byte for byte
(and named in published releases); `Analysis.from_dict(res)` wraps it. Every typed object keeps the dict
it was read from (`raw`), so a reader can reach a field the model does not name yet. A field missing
from an older analysis.json reads as its default (None or empty), never as an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

T = TypeVar("T")


def _pick(cls: type[T], d: dict | None, **override: Any) -> T:
    """An instance of dataclass `cls` from the keys of `d` that name its fields (raw = d)."""
    d = d or {}
    kw = {f.name: d[f.name] for f in fields(cls) if f.name in d and f.name not in override and f.name != "raw"}
    return cls(**kw, **override, raw=d)  # type: ignore[call-arg]


@dataclass(frozen=True)
class Throughput:
    n: int = 0
    mean: float | None = None
    std: float | None = None
    std_kind: str | None = None
    cv: float | None = None
    min: float | None = None
    max: float | None = None
    rel_range: float | None = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Point:
    point: int
    label: str = ""
    repeats_planned: int = 0
    repeats_present: int = 0
    repeats_measured: int = 0
    trials: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    output_throughput: Throughput = field(default_factory=Throughput)
    failed: int | None = None
    output_len_mismatches: int | None = None
    flags: list[str] = field(default_factory=list)
    absent: dict[str, str] = field(default_factory=dict)
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: dict) -> "Point":
        return _pick(cls, d, output_throughput=_pick(Throughput, d.get("output_throughput")))


@dataclass(frozen=True)
class Trial:
    id: str
    index: int = 0
    repeat: int = 0
    point: int = 0
    position: int = 0
    status: str = "missing"
    session: int | None = None
    output_throughput: float | None = None
    failed: int | None = None
    flags: list[str] = field(default_factory=list)
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def present(self) -> bool:
        return self.status == "present"


@dataclass(frozen=True)
class Comparison:
    """A paired comparison as analysis.json holds it (declared, adjacent, or computed for compare)."""

    name: str
    a: int
    b: int
    pairs: int = 0
    repeats_planned: int = 0
    mean_diff: float | None = None
    wins_a: int = 0
    wins_b: int = 0
    ties: int = 0
    verdict: str = ""  # "finding" | "equivalent" | "not significant" | "no claim"
    statement: str = ""  # the sentence carrying effect, interval, p and MDE
    metric: str = "output_throughput"
    unit: str = "repeat"  # or "session" (a server start), "host"
    n_pairs: int = 0  # paired repeats
    n_units: int = 0  # the test's n: repeats, or sessions when they are the unit
    effect: float | None = None
    ci95: list[float] | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    ci_adjusted: list[float] | None = None
    ci_adjusted_level: float | None = None
    family: int = 1
    test: str = ""
    mde: float | None = None
    sign_p: float | None = None
    perm_p: float | None = None
    sign_note: str | None = None
    better: int | None = None
    repeats: list[dict] = field(default_factory=list)  # per repeat: session, trials, a, b, diff, winner, flags
    noise: dict = field(default_factory=dict)  # CVs and ranges of both points (descriptive, not a rule)
    sessions: dict | None = None  # within/between-session spread of ln(a/b) when several sessions
    flags: list[str] = field(default_factory=list)
    df: int | None = None  # the test's degrees of freedom (n_units - 1)
    scope: str = ""  # "this server start", "these N server starts", "these N hosts" ("" in older analyses)
    scope_note: str | None = None  # why the verdict is not a claim about the configuration (fewer than 3 starts)
    halfwidth: float | None = None  # the interval's half-width (not the MDE)
    margin: float | None = None  # declared equivalence margin
    tost_p: float | None = None
    equivalent: bool | None = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_finding(self) -> bool:
        return self.verdict == "finding"

    def as_json(self) -> dict:
        """The keys a reader of `evidence analyze --json` relies on."""
        return {"a": self.a, "b": self.b, "metric": self.metric, "n_pairs": self.n_pairs, "effect": self.effect,
                "ci95": self.ci95, "p_value": self.p_value, "test": self.test, "mde": self.mde,
                "verdict": self.verdict, "unit": self.unit, "n_units": self.n_units, "df": self.df,
                "scope": self.scope, "scope_note": self.scope_note}


@dataclass(frozen=True)
class Ordering:
    statement: str | None = None
    supported_statement: str | None = None
    held_in_repeats: int = 0
    repeats_planned: int = 0
    held_in_every_repeat: bool = False
    raw: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Completeness:
    trials_planned: int = 0
    trials_present: int = 0
    missing: list[str] = field(default_factory=list)
    with_failures: list[str] = field(default_factory=list)
    zero_completed: list[str] = field(default_factory=list)
    unexpected_trials: list[str] = field(default_factory=list)
    plan_matches_spec: bool = True
    run_status: str | None = None
    load_problems: list[str] = field(default_factory=list)
    raw: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class RunInfo:
    run_id: str | None = None
    spec_name: str | None = None
    spec_sha256: str | None = None
    status: str | None = None
    created_unix: float | None = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class SpecInfo:
    name: str = ""
    title: str = ""
    points: list[int] = field(default_factory=list)
    repeats: int = 0
    order: str = ""
    cv: str = ""
    latency_metrics: list[str] = field(default_factory=list)
    percentiles: list[float] = field(default_factory=list)
    raw: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Analysis:
    run: RunInfo
    spec: SpecInfo
    completeness: Completeness
    points: list[Point]
    trials: list[Trial]
    comparisons: list[Comparison]
    adjacent: list[Comparison]
    ordering: Ordering
    caveats: list[str]
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def from_dict(cls, res: dict) -> "Analysis":
        return cls(
            run=_pick(RunInfo, res.get("run")), spec=_pick(SpecInfo, res.get("spec")),
            completeness=_pick(Completeness, res.get("completeness")),
            points=[Point.from_dict(p) for p in res.get("points") or []],
            trials=[_pick(Trial, t) for t in res.get("trials") or []],
            comparisons=[_pick(Comparison, c) for c in res.get("comparisons") or []],
            adjacent=[_pick(Comparison, c) for c in res.get("adjacent") or []],
            ordering=_pick(Ordering, res.get("ordering")),
            caveats=list(res.get("caveats") or []), raw=res)

    def point(self, p: int) -> Point | None:
        return next((x for x in self.points if x.point == p), None)

    def trial_at(self, repeat: int, point: int) -> Trial | None:
        return next((t for t in self.trials if t.repeat == repeat and t.point == point), None)

    def comparison(self, a: int, b: int) -> Comparison | None:
        return next((c for c in self.comparisons if (c.a, c.b) == (a, b)), None)

    @property
    def caution(self) -> bool:
        c = self.completeness
        return bool(c.missing or c.with_failures or c.zero_completed or c.run_status != "complete")
