"""The typed analysis: what analysis.json holds, as dataclasses.

`evidence.analysis.analyze.build_analysis` assembles an `Analysis`; `Analysis.to_dict()` is what
analysis.json is written from (canonical JSON, so the bytes are those of the dict). Readers (tables,
compare, the report's verdicts and index, the CLI) use attributes, not string keys;
`Analysis.from_dict(d)` reads a written analysis.json back, an older one included: a field missing
from it reads as its default (None or empty), never as an error, and is not written back
(evidence.analysis.record). The rows (trials, points, comparisons) are in evidence.analysis.model_rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from evidence.analysis.model_rows import (
    Comparison,
    Interval,
    Noise,
    PairedRepeat,
    Point,
    PointLatency,
    PromptTokens,
    RepeatValue,
    RequestThroughput,
    SessionSpread,
    SideBySide,
    Throughput,
    Trial,
)
from evidence.analysis.record import Record, extra_keys, unset_keys

__all__ = [
    "Analysis",
    "Arms",
    "ArmComparison",
    "ArmVerdict",
    "CaveatKind",
    "EngineChange",
    "GoodputPoint",
    "Pin",
    "Completeness",
    "Comparison",
    "Dominance",
    "DominancePair",
    "DominancePoint",
    "Goodput",
    "Interval",
    "PromptTokens",
    "SessionSpread",
    "Steady",
    "GoodputTrial",
    "Look",
    "LookComparison",
    "Noise",
    "Ordering",
    "OrderingLink",
    "OrderingRepeat",
    "PairedRepeat",
    "Point",
    "PointLatency",
    "RepeatValue",
    "RequestThroughput",
    "RunInfo",
    "RunScope",
    "Sequential",
    "Setup",
    "SideBySide",
    "SpecInfo",
    "TelemetryRow",
    "Throughput",
    "Trial",
    "VarianceComponents",
    "VariancePoint",
    "Within",
    "WithinPoint",
    "WithinTrial",
    "as_analysis",
]


@dataclass(frozen=True)
class RunInfo(Record):
    run_id: str | None = None
    spec_name: str | None = None
    spec_sha256: str | None = None
    status: str | None = None
    created_unix: float | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class SpecInfo(Record):
    name: str = ""
    title: str = ""
    points: list[int] = field(default_factory=list)
    repeats: int = 0
    order: str = ""
    plan_note: str | None = None
    comparisons: list[dict] = field(default_factory=list)  # {"a": point, "b": point}
    latency_metrics: list[str] = field(default_factory=list)
    percentiles: list[float] = field(default_factory=list)
    cv: str = ""
    slos_ms: dict[str, float] = field(default_factory=dict)
    input_len: int | None = None
    output_len: int | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Completeness(Record):
    trials_planned: int = 0
    trials_present: int = 0
    missing: list[str] = field(default_factory=list)
    with_failures: list[str] = field(default_factory=list)
    zero_completed: list[str] = field(default_factory=list)
    unexpected_trials: list[str] = field(default_factory=list)
    plan_matches_spec: bool = True
    run_status: str | None = None
    load_problems: list[str] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class OrderingRepeat(Record):
    repeat: int = 0
    statement: str | None = None
    complete: bool = False
    matches: bool | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class OrderingLink(Record):
    """Adjacent points lo < hi: the symbol of their means and the paired test behind it."""

    lo: int = 0
    hi: int = 0
    symbol: str | None = None
    effect: float | None = None
    ci95: list[float] | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    mde: float | None = None
    verdict: str = ""
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Ordering(Record):
    statement: str | None = None
    supported_statement: str | None = None
    held_in_repeats: int = 0
    repeats_planned: int = 0
    held_in_every_repeat: bool = False
    repeats: list[OrderingRepeat] = field(default_factory=list)
    links: list[OrderingLink] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class DominancePoint(Record):
    point: int = 0
    label: str = ""
    dominated: bool | None = None
    dominated_by: list[int] = field(default_factory=list)
    dominates: list[int] = field(default_factory=list)
    tied_with: list[int] = field(default_factory=list)
    not_compared: list[int] = field(default_factory=list)
    note: str | None = None
    flags: list[str] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class DominancePair(Record):
    dominant: int = 0
    dominated: int = 0
    statement: str = ""
    held_in_repeats: int = 0
    repeats_planned: int = 0
    verdict: str = ""
    verdict_statement: str = ""
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Dominance(Record):
    criteria: list[str] = field(default_factory=list)
    points: list[DominancePoint] = field(default_factory=list)
    pairs: list[DominancePair] = field(default_factory=list)
    frontier: list[int] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()

    def pair(self, dominant: int, dominated: int) -> DominancePair | None:
        return next((d for d in self.pairs if (d.dominant, d.dominated) == (dominant, dominated)), None)


@dataclass(frozen=True)
class TelemetryRow(Record):
    """A trial's server telemetry; only a present one has samples, plateau and the per-gauge values."""

    trial: str = ""
    repeat: int = 0
    point: int = 0
    position: int = 0
    status: str = ""
    absent: str | None = None
    samples: int | None = None
    sample_interval_s: float | None = None
    plateau_s: list[float] | None = None
    sustained: dict[str, float | None] = field(default_factory=dict)
    max: dict[str, float | None] = field(default_factory=dict)
    delta: dict[str, float | None] = field(default_factory=dict)
    absent_keys: dict[str, str] = field(default_factory=dict)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Steady(Record):
    """A trial's steady-state window (evidence.analysis.timeseries) and its throughput there."""

    start_s: float | None = None
    end_s: float | None = None
    steady: bool | None = None
    throughput: float | None = None
    trend_rho: float | None = None
    trend_p: float | None = None
    needed_s: float | None = None  # the trial length a steady state would need (None: no drift found)
    detectable_drift: float | None = None  # the drift the trend test would see with 80% power (absent in older ones)
    note: str | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class WithinTrial(Record):
    trial: str = ""
    repeat: int = 0
    point: int = 0
    status: str = ""
    absent: str | None = None  # why there is no series
    bin_s: float | None = None
    series: dict = field(default_factory=dict)  # t, output_tps, in_flight, running, waiting per bin
    steady: Steady | None = None
    waves: dict | None = None  # note, and the period or modes found
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class WithinPoint(Record):
    point: int = 0
    trials: int = 0
    steady_throughput_mean: float | None = None
    steady_trials: int = 0
    wave_trials: int = 0
    regimes: dict | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Within(Record):
    bin_s: float | None = None
    trials: list[WithinTrial] = field(default_factory=list)
    points: list[WithinPoint] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class GoodputTrial(Record):
    trial: str = ""
    repeat: int = 0
    point: int = 0
    position: int = 0
    requests: int | None = None
    meeting: int | None = None
    undetermined: int | None = None
    attainment: float | None = None
    goodput_rps: float | None = None
    absent: str | None = None
    flags: list[str] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class GoodputPoint(Record):
    point: int = 0
    n: int = 0
    goodput_rps_mean: float | None = None
    attainment_mean: float | None = None
    flags: list[str] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Goodput(Record):
    slos_ms: dict[str, float] = field(default_factory=dict)
    trials: list[GoodputTrial] = field(default_factory=list)
    points: list[GoodputPoint] = field(default_factory=list)
    absent: str | None = None  # None: the spec sets SLOs
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class VariancePoint(Record):
    point: int = 0
    sessions: int = 0
    repeats: int = 0
    sd_between: float | None = None
    sd_between_ci: list[float] | None = None
    sd_within: float | None = None
    sd_within_ci: list[float] | None = None
    share_between: float | None = None
    absent: str | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class VarianceComponents(Record):
    metric: str = "output_throughput"
    scale: str = "ln"
    level: float = 0.95
    method: str = ""
    points: list[VariancePoint] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class ArmComparison(Record):
    """Two arms of spec.arms at one point, the block of server starts as the unit."""

    a: str = ""
    b: str = ""
    point: int = 0
    a_values: list[float] = field(default_factory=list)
    b_values: list[float] = field(default_factory=list)
    verdict: str = ""
    effect: float | None = None
    ci: list[float] | None = None
    ci_level: float | None = None
    margin: float | None = None
    scope: str | None = None
    n_units: int = 0
    df: int | None = None
    statement: str = ""
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class ArmVerdict(Record):
    """A test inside one arm (`arm`: point a against point b) or of the interaction (`arm_a` against `arm_b`: does
    the arm change how a and b compare?), its interval at its Holm level."""

    a: int = 0
    b: int = 0
    arm: str | None = None
    arm_a: str | None = None
    arm_b: str | None = None
    verdict: str = ""
    effect: float | None = None
    ci: list[float] | None = None
    ci_level: float | None = None
    margin: float | None = None
    scope: str | None = None
    statement: str = ""
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Arms(Record):
    method: str = ""
    comparisons: list[ArmComparison] = field(default_factory=list)
    within: list[ArmVerdict] = field(default_factory=list)  # the declared comparisons inside each arm
    interaction: list[ArmVerdict] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class LookComparison(Record):
    """A comparison at one look of --until-decided (a and b: points, or arms when `point` is set)."""

    a: Union[int, str, None] = None
    b: Union[int, str, None] = None
    point: int | None = None
    verdict: str | None = None
    unit: str | None = None
    n_units: int | None = None
    t: float | None = None
    t_boundary: float | None = None
    alpha_spent: float | None = None
    rci: list[float | None] | None = None
    conditional_power: float | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Look(Record):
    look: int | None = None
    max_looks: int | None = None
    repeats: int | None = None
    comparisons: list[LookComparison] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Sequential(Record):
    looks: list[Look] = field(default_factory=list)
    stop: dict | None = None
    rule: str | None = None
    decisions: list[dict] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class RunScope(Record):
    server_starts: int = 0
    scope: str = ""
    claim_note: str | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class EngineChange(Record):
    """A setting engine/resolved.json of a later server start (`file`) resolved unlike the first one's."""

    file: str = ""
    name: str = ""
    first: Any = None  # the resolved entry as each file holds it ({value, source...} or a bare value)
    this: Any = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Pin(Record):
    """A pin of provenance.json: what the spec requested and what the environment had."""

    pin: Any = None
    requested: Any = None
    effective: Any = None
    ok: bool | None = None
    note: str | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Setup(Record):
    engine_resolved: dict | None = None
    engine_resolved_files: list[str] = field(default_factory=list)
    engine_resolved_changes: list[EngineChange] = field(default_factory=list)
    pins: list[Pin] = field(default_factory=list)  # an entry that is no object stays as provenance.json has it
    provenance_files: list[str] = field(default_factory=list)
    profile_files: list[str] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class CaveatKind(Record):
    """What a caveat is (its kind), what it is about (a comparison's name, or None) and its one-line form."""

    kind: str | None = None
    about: str | None = None
    short: str | None = None
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()


@dataclass(frozen=True)
class Analysis(Record):
    schema: str = ""
    run: RunInfo = field(default_factory=RunInfo)
    spec: SpecInfo = field(default_factory=SpecInfo)
    methods: dict = field(default_factory=dict)
    completeness: Completeness = field(default_factory=Completeness)
    trials: list[Trial] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    adjacent: list[Comparison] = field(default_factory=list)
    dominance: Dominance = field(default_factory=Dominance)
    telemetry: list[TelemetryRow] = field(default_factory=list)
    within: Within = field(default_factory=Within)
    goodput: Goodput = field(default_factory=Goodput)
    setup: Setup = field(default_factory=Setup)
    variance_components: VarianceComponents | None = None
    arms: Arms | None = None  # only a spec with arms
    sequential: Sequential | None = None  # only a run of --until-decided
    scope: RunScope = field(default_factory=RunScope)
    ordering: Ordering = field(default_factory=Ordering)
    caveats: list[str] = field(default_factory=list)
    caveat_kinds: list[CaveatKind] = field(default_factory=list)  # one per caveat, in the same order
    bottleneck: dict | None = None  # only with host telemetry (evidence.analysis.bottleneck)
    files: list[str] = field(default_factory=list)
    extra: dict = extra_keys()
    unset: frozenset[str] = unset_keys()

    OMIT_NONE = frozenset({"arms", "sequential", "bottleneck"})

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


def as_analysis(res: Analysis | dict) -> Analysis:
    """The typed analysis, from itself or from the dict of analysis.json (a reader given either)."""
    return res if isinstance(res, Analysis) else Analysis.from_dict(res)
