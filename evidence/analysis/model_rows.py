"""The rows of the typed analysis (evidence.analysis.model): trials, points and paired comparisons.

Latency statistics stay dicts keyed by statistic ("mean", "median", "p99"...: the spec's percentiles name
them), as do the per-gauge telemetry values (the engine adapter names the gauges).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evidence.analysis.record import Record, extra_keys, unset_keys


@dataclass(frozen=True)
class RepeatValue(Record):
    repeat: int = 0
    value: float | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Throughput(Record):
    """A point's output throughput over its repeats."""

    n: int = 0
    mean: float | None = None
    std: float | None = None
    std_kind: str | None = None
    cv: float | None = None
    min: float | None = None
    max: float | None = None
    rel_range: float | None = None
    values: list[RepeatValue] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class RequestThroughput(Record):
    n: int = 0
    mean: float | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Interval(Record):
    """The 95% interval of one latency statistic at a point, on ln across repeats or server starts."""

    value: float | None = None  # the mean over repeats
    geometric_mean: float | None = None  # the interval's centre
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    unit: str = ""
    level: float | None = None
    absent: str | None = None  # why there is no interval
    absent_short: str | None = None  # the reason in a few words (absent in older analyses)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class PointLatency(Record):
    """One latency metric at a point: each statistic averaged over repeats, pooled, and its 95% intervals."""

    mean_over_repeats: dict | None = None  # statistic -> ms, and n_trials
    pooled: dict | None = None  # statistic -> ms, and n
    intervals: dict[str, Interval] | None = None  # statistic -> interval (evidence.analysis.latency)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class PromptTokens(Record):
    input_len_nominal: int | None = None
    nominal_mean: float | None = None
    server: dict | None = None  # min, max, mean, total as the server counted them
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Point(Record):
    point: int = 0
    label: str = ""
    repeats_planned: int = 0
    repeats_present: int = 0
    repeats_measured: int = 0
    trials: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    output_throughput: Throughput = field(default_factory=Throughput)
    request_throughput: RequestThroughput = field(default_factory=RequestThroughput)
    latency: dict[str, PointLatency] = field(default_factory=dict)
    requests: int | None = None
    completed: int | None = None
    failed: int | None = None
    output_len_mismatches: int | None = None
    chunk_usage_mismatches: int | None = None
    prompt_tokens: PromptTokens = field(default_factory=PromptTokens)
    telemetry_sustained_mean: dict[str, float | None] = field(default_factory=dict)  # gauge -> mean of sustained
    flags: list[str] = field(default_factory=list)
    absent: dict[str, str] = field(default_factory=dict)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Trial(Record):
    id: str = ""
    index: int = 0
    repeat: int = 0
    session: int | None = None
    point: int = 0
    position: int = 0
    requests_planned: int | None = None
    status: str = "missing"
    requests: int | None = None
    completed: int | None = None
    failed: int | None = None
    errors: dict = field(default_factory=dict)
    duration_s: float | None = None
    client_cpu_util: float | None = None
    dispatch_lag_max_s: float | None = None
    output_throughput: float | None = None
    request_throughput: float | None = None
    total_output_tokens: int | None = None
    output_len_mismatches: int | None = None
    chunk_usage_mismatches: int | None = None
    prompt_len_nominal_mean: float | None = None
    prompt_tokens_server: dict | None = None
    latency: dict[str, dict | None] = field(default_factory=dict)  # metric -> statistic -> ms
    absent: dict[str, str] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()

    @property
    def present(self) -> bool:
        return self.status == "present"


@dataclass(frozen=True)
class PairedRepeat(Record):
    """One repeat (or server start) of a paired comparison: both trials' throughput and a's relative difference."""

    repeat: int = 0
    session: int | None = None
    trial_a: str | None = None
    trial_b: str | None = None
    a: float | None = None
    b: float | None = None
    diff: float | None = None
    winner: str | None = None  # "a" | "b" | "tie" | None
    flags: list[str] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Noise(Record):
    """Run-to-run CVs and relative ranges of both points (descriptive, never a rule)."""

    a_cv: float | None = None
    b_cv: float | None = None
    cv_kind: str = ""
    a_rel_range: float | None = None
    b_rel_range: float | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class SessionSpread(Record):
    """Within- and between-server-start sd of ln(a/b), when the pairs came from several server starts."""

    sessions: int = 0
    repeats: int = 0
    sd_within_log: float | None = None
    sd_between_log: float | None = None
    sd_within_log_ci95: list[float] | None = None
    sd_between_log_ci95: list[float] | None = None
    f_p: float | None = None
    note: str | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class SideBySide(Record):
    """One statistic of a declared comparison at both points (output throughput or a latency statistic)."""

    metric: str = ""
    stat: str = ""
    unit: str = ""
    a: float | None = None
    b: float | None = None
    change: float | None = None
    better: str | None = None
    pooled_a: float | None = None
    pooled_b: float | None = None
    pooled_change: float | None = None
    flags: list[str] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Comparison(Record):
    """A paired comparison as analysis.json holds it (declared, adjacent, or computed for compare)."""

    name: str = ""
    a: int = 0
    b: int = 0
    pairs: int = 0
    repeats_planned: int = 0
    mean_diff: float | None = None
    min_diff: float | None = None
    max_diff: float | None = None
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
    repeats: list[PairedRepeat] = field(default_factory=list)
    noise: Noise = field(default_factory=Noise)
    sessions: SessionSpread | None = None  # within/between-session spread of ln(a/b) when several sessions
    flags: list[str] = field(default_factory=list)
    df: int | None = None  # the test's degrees of freedom (n_units - 1)
    scope: str = ""  # "this server start", "these N server starts", "these N hosts" ("" in older analyses)
    scope_note: str | None = None  # why the verdict is not a claim about the configuration (fewer than 3 starts)
    halfwidth: float | None = None  # the interval's half-width (not the MDE; absent in older analyses)
    margin: float | None = None  # declared equivalence margin
    tost_p: float | None = None
    equivalent: bool | None = None
    latency_side_by_side: list[SideBySide] | None = None  # declared comparisons only
    sequential: dict | None = None  # --until-decided: its decision for this comparison
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()

    OMIT_NONE = frozenset({"latency_side_by_side", "sequential"})

    @property
    def is_finding(self) -> bool:
        return self.verdict == "finding"

    def as_json(self) -> dict:
        """The keys a reader of `evidence analyze --json` relies on."""
        return {
            "a": self.a,
            "b": self.b,
            "metric": self.metric,
            "n_pairs": self.n_pairs,
            "effect": self.effect,
            "ci95": self.ci95,
            "p_value": self.p_value,
            "test": self.test,
            "mde": self.mde,
            "verdict": self.verdict,
            "unit": self.unit,
            "n_units": self.n_units,
            "df": self.df,
            "scope": self.scope,
            "scope_note": self.scope_note,
        }
