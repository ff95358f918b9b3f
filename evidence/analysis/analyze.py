"""Run directory -> analysis tables: a pure function of the raw files.

`analyze_run(run_dir)` reads only raw inputs (spec.resolved.json, plan.json,
run.json, provenance.json, engine/resolved.json, trials/*/{requests.jsonl,
telemetry.jsonl, meta.json, summary.json}); it never reads analysis/,
figures/ or report/, never the clock, uses no randomness, and writes no
absolute path. Built twice from the same raw files, the same bytes.

Every metric comes from `evidence.metrics` (one definition per metric); this
module only aggregates. The methods, as recorded in analysis.json "methods":

- Per trial: `metrics.trial_metrics` on the trial's measured records, with the
  spec's percentiles (numpy linear interpolation, vLLM's).
- Per point, throughput: mean over the repeats whose throughput was measured;
  std with the spec's `analysis.cv` (population: / n; sample: / (n - 1));
  CV = std / mean; relative range = (max - min) / mean. One measured repeat:
  std, CV and range are null ("single measured repeat"), never 0.
- Per point, latency, two methods side by side:
  "mean_over_repeats": each statistic (mean, median, pXX) computed within a
  trial (pooling that trial's requests), then averaged over the repeats;
  "pooled": all repeats' records pooled into one distribution.
  The article's numbers follow "mean_over_repeats"; tables name the method.
- Paired comparison a vs b: the stated procedure of `evidence.analysis.stats`
  (paired t on ln(T_a / T_b) per repeat, or per engine session when the pairs
  span several; its 95% interval back-transformed; exact sign and permutation
  p; MDE), Holm across the spec's declared comparisons and across the adjacent
  links of the ordering. Verdict: finding / not significant / no claim, and
  the sentence shown everywhere carries the interval, p and MDE.
- Dominance, ordering, telemetry plateau, SLO goodput: see their functions.

Numbers: analysis.json stores floats rounded to 9 decimal places (so the last
bits of a summation never change the bytes); relative values there are
fractions. CSVs use fixed decimals per column kind (see CSV_DECIMALS) and show
relative values in percent (columns ending in _pct). An empty CSV cell is a
value that could not be measured; the row's flags/absent column says why.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from evidence.analysis.arms import arm_comparisons
from evidence.analysis.bottleneck import bottleneck_reading
from evidence.analysis.caveats import caveats
from evidence.analysis.findings import comparison_family, dominance, ordering, side_by_side
from evidence.analysis.goodput import goodput
from evidence.analysis.latency import METHOD as LATENCY_INTERVALS, attach_intervals
from evidence.analysis.load import RunData, TrialData, load_run
from evidence.analysis.model import (Analysis, Arms, Comparison, Completeness, Dominance, EngineChange, Goodput,
                                     Ordering, Pin, Point, RunInfo, RunScope, Sequential, Setup, SpecInfo,
                                     TelemetryRow, Trial, VarianceComponents, VariancePoint, Within, WithinPoint,
                                     WithinTrial, as_analysis)
from evidence.analysis.numbers import JSON_DECIMALS, interval_text, label, mean_of, round_floats
from evidence.analysis.stats import components_of, scope_note_of, scope_of
from evidence.analysis.tables import CSV_DECIMALS, csv_names, point_row, trial_row
from evidence.analysis.telemetry import (GAUGES, PLATEAU_MIN_SAMPLES, PLATEAU_TRIM, SERIES_BIN_S, telemetry_row,
                                        within_point_rows, within_trial_row)
from evidence.analysis.timeseries import BATCH, REGIME_D, REGIME_P, TREND_BATCHES, TREND_P, TREND_RHO, WAVE_ACF
from evidence.canon import dumps, write_atomic
from evidence.metrics import METRIC_DOCS, PERCENTILE_METHOD
from evidence.spec.plan import make_plan
from evidence.rundir import ANALYSIS, TRACE_ANALYSES_JSON


SCHEMA = "evidence.analysis/1"

VC_METHOD = ("ln(output throughput) per trial = point mean + server-start effect + residual (one-way random effects "
             "per point); ANOVA estimators (REML's for a balanced design), the between-start variance floored at 0; "
             "95% intervals: chi-square for the within-start sd, Graybill-Wang modified large-sample for the "
             "between-start sd. One server start: the between-start sd is not measured")


METHODS = {
    "trial_metrics": "each trial's measured requests (phase 'measure') through evidence.metrics.trial_metrics; "
                     f"percentiles by numpy '{PERCENTILE_METHOD}' interpolation (vLLM's)",
    "throughput_over_repeats": "mean over the repeats whose output throughput was measured; std per spec.analysis.cv "
                               "(population divides by n, sample by n - 1); CV = std / mean; relative range = "
                               "(max - min) / mean; with one measured repeat std, CV and range are null, never 0",
    "latency_mean_over_repeats": "each statistic (mean, median, percentiles) computed within a trial by pooling that "
                                 "trial's requests, then the arithmetic mean of that statistic over the point's repeats",
    "latency_pooled": "all of a point's repeats pooled into one distribution, then the statistic",
    "paired_difference": "per repeat r with both trials measured: d_r = (T_a - T_b) / T_b on output throughput; "
                         "mean, min and max over those repeats (descriptive); a wins repeat r when d_r > 0, b when "
                         "d_r < 0",
    "paired_test": "the unit is fixed by the design: with trials from 2 or more server starts (sweep.sessions) the "
                   "server start, valued by the mean of ln(a/b) over its repeats (the model ln(a/b) = mu + start + "
                   "residual; for a balanced design the session-means t test is REML with Satterthwaite df); with "
                   "one start the repeat, and the verdict's scope is that server start. "
                   "Paired t-test on ln(a/b) over the units (df = units - 1), two-sided at alpha 0.05; its t interval "
                   "of the mean log ratio back-transformed as exp(.) - 1 (assumes roughly normal log ratios and "
                   "independent units); effect = mean of (a - b) / b over the pairs; exact sign test and exact "
                   "sign-flip permutation p beside it (no distribution-free claim at 95% is possible below 6 units); "
                   "MDE = (t(1 - a/2, df) + t(0.8, df)) sd / sqrt(n) at the level used (Holm's step in a family), "
                   "back-transformed: the smallest effect found with 80% power. Every verdict carries its unit, n, "
                   "df and scope ('this server start', 'these N server starts'); a claim about the configuration "
                   "needs at least 3 server starts (scope_note says why one with fewer is not). With a declared "
                   "margin m: two one-sided tests against +-ln(1 + m) at the same level; both reject: 'equivalent'",
    "multiplicity": "Holm's step-down over the spec's declared comparisons (one family) and over the ordering's "
                    "adjacent links (another): the verdict follows the Holm-adjusted p (p_adjusted). ci95 and "
                    "p_value are each comparison's own (tested alone); ci_adjusted is the interval at the level of "
                    "its Holm step (ci_adjusted_level: 95% when alone, wider in a family), which agrees with the "
                    "verdict. A finding's 95% interval always excludes 0",
    "verdict": "'finding' when the (Holm-adjusted) test rejects, i.e. the interval excludes 0; 'not significant' when "
               "it does not (the interval and the MDE are shown); 'no claim' with fewer than 2 units. The sentence "
               "beside each verdict carries the effect, interval, p, wins and unit count; missing or failed trials "
               "are named in its flags. Run-to-run CVs and ranges are shown as noise, never used as a rule",
    "latency_change": "relative change going from a to b: (value_b - value_a) / value_a",
    "dominance": "criteria: mean output throughput (higher is better) and, for every spec.analysis.latency_metrics, "
                 "its mean and each spec.analysis.percentiles value (mean over repeats; lower is better; directions from the "
                 "metric registry). Q dominates P on the means when Q is >= P on throughput, <= P on every latency "
                 "criterion, and strictly better on at least one; equal on all criteria is a tie; a point with an "
                 "unmeasured criterion is not compared. 'held_in_repeats' checks the same rule on each repeat's own "
                 "trials. Its verdict: the paired test on every criterion where the means differ (Holm over those "
                 "criteria); 'finding' only when Q is better on each with its interval",
    "ordering": "adjacent points in ascending concurrency compared on mean output throughput ('<', '>' or '='); "
                "each repeat's statement is built from that repeat's trials; 'supported' replaces a symbol by '~' "
                "where the paired test between the two points (Holm over the adjacent links) is not a finding in the "
                "direction of the means",
    "telemetry_plateau": f"measured interval = first send to last completion of the trial; the plateau drops the first "
                         f"and last {int(PLATEAU_TRIM * 100)}% of it (ramp-up and drain); sustained value = median of "
                         f"the samples inside the plateau (needs >= {PLATEAU_MIN_SAMPLES}); max over all samples; "
                         "counters: last sample minus first sample of the trial's telemetry",
    "within_trial": f"each trial's measured requests binned at {SERIES_BIN_S} s on the trial clock: output tokens/s "
                    "(a request's completion tokens spread over its token-bearing chunks), mean requests in flight "
                    "(send to end of stream), and the server's running / waiting requests from /metrics samples",
    "steady_state": f"the window ends where the closed loop stops running at full concurrency (the last bin with "
                    f"in-flight >= 95% of the peak); its start is MSER-{BATCH} over batch means of {BATCH} bins; "
                    "steady-state throughput = mean output tokens/s over the window, shown beside the whole-trial "
                    f"throughput. Trend: Spearman over {TREND_BATCHES} batch means of the window; |rho| > "
                    f"{TREND_RHO} with p < {TREND_P} means no steady state, and the trial length needed is named; "
                    "'no trend' states the linear drift over the window the test finds with 80% power "
                    "(detectable_drift: the batch means' residual sd about their line times the drift-to-noise ratio "
                    "a seeded simulation of the rule gives, over the window's mean)",
    "waves": f"a periodic component of the detrended per-bin throughput in the window (autocorrelation peak >= "
             f"{WAVE_ACF} and above 3/sqrt(n)) or a bimodal per-bin distribution (Sarle's coefficient > 5/9)",
    "regimes": f"across the repeats of a point (4 or more), the best split of trial throughputs into two groups, "
               f"tested against one normal population (seeded simulation, p < {REGIME_P}) with Ashman's D > {REGIME_D}",
    "goodput": "a measured request meets the SLOs when it completed and, for every metric in spec.analysis.slos_ms, "
               "its value(s) from evidence.metrics are all <= the bound (ITL: every gap of the request); a request "
               "with no value for an SLO metric does not count as meeting it (counted as undetermined); goodput = "
               "meeting requests / trial duration; attainment = meeting / measured requests (failed ones included)",
    "numbers": f"analysis.json floats rounded to {JSON_DECIMALS} decimals, relative values as fractions; CSV fixed "
               "decimals per column kind (CSV_DECIMALS), relative values in percent (_pct); empty = not measured",
}


def _setup(data: RunData) -> Setup:
    prov = data.provenance or {}
    pins = prov.get("pins") if isinstance(prov.get("pins"), list) else []
    later_diff = []
    base = data.engine_resolved or {}
    for i, other in enumerate(data.engine_resolved_later, start=2):
        for k in sorted(set(base) | set(other)):
            if base.get(k) != other.get(k):
                later_diff.append({"file": data.engine_resolved_files[i - 1], "name": k,
                                   "first": base.get(k), "this": other.get(k)})
    return Setup(engine_resolved=data.engine_resolved, engine_resolved_files=data.engine_resolved_files,
                 engine_resolved_changes=[EngineChange.from_dict(c) for c in later_diff],
                 pins=[Pin.from_dict(p) if isinstance(p, dict) else p for p in pins],
                 provenance_files=data.provenance_files, profile_files=data.profile_files)


def compute_analysis(data: RunData) -> dict:
    """Everything analysis.json holds, from loaded raw data (no I/O), as the dict it is written from."""
    return build_analysis(data).to_dict()


def build_analysis(data: RunData) -> Analysis:
    """The typed analysis of loaded raw data (no I/O): analysis.json is `to_dict()` of it.

    The sections computed here (run, spec, completeness, setup, scope, variance components) are built as
    their records; the rows of the other stages (evidence.analysis.tables, findings, telemetry, goodput...)
    are dicts that later steps amend in place (latency intervals, the sequential decisions' sentences), typed
    once complete. The caveats read the typed analysis."""
    spec = data.spec
    # Rows are rounded first (JSON_DECIMALS) so that every later comparison (ties in dominance, '=' in
    # the ordering, paired differences) sees exactly the numbers analysis.json publishes.
    rows = {t.id: round_floats(trial_row(t, spec)) for t in data.trials}
    trials_by = {(t.repeat, t.point): t for t in data.trials}
    by_point: dict[int, list[TrialData]] = {}
    for t in data.trials:
        by_point.setdefault(t.point, []).append(t)
    points_l = [round_floats(point_row(P, by_point.get(P, []), rows, spec)) for P in spec.sweep.points]
    points = {p["point"]: p for p in points_l}
    # every repeat the plan holds: --until-decided appends blocks after the spec's planned repeats
    repeats = max([spec.sweep.repeats] + [t.repeat for t in data.trials])
    by_rp = {(t.repeat, t.point): rows[t.id] for t in data.trials}
    comps = comparison_family([(c.a, c.b) for c in spec.analysis.comparisons], points, by_rp, repeats,
                              [getattr(c, "margin", None) for c in spec.analysis.comparisons])
    for c in comps:
        c["latency_side_by_side"] = side_by_side(c, points, spec)
    adj = comparison_family(list(zip(spec.sweep.points, spec.sweep.points[1:])), points, by_rp, repeats)
    telemetry = [telemetry_row(t, rows[t.id]) for t in data.trials]
    tele_by_point: dict[int, dict[str, float | None]] = {}
    for P in spec.sweep.points:
        d: dict[str, float | None] = {}
        for _, name in GAUGES:
            vs = [x["sustained"][name] for x in telemetry if x["point"] == P and x["status"] == "present"
                  and x["sustained"].get(name) is not None]
            d[name] = mean_of(vs)
        tele_by_point[P] = d
    for p in points_l:
        p["telemetry_sustained_mean"] = tele_by_point[p["point"]]
    within = [within_trial_row(t) for t in sorted(data.trials, key=lambda t: t.index)]
    within_points = within_point_rows(list(spec.sweep.points), within,
                                      {(t.repeat, t.point): rows[t.id]["output_throughput"] for t in data.trials})
    try:
        expect = json.loads(dumps(make_plan(spec).as_dict()))
        got = dict(data.plan)
        if "until_decided" in got:  # --until-decided appended blocks: the planned part must still be the spec's
            got.pop("until_decided")
            got["trials"] = got["trials"][:len(expect["trials"])]
            if "sessions" in expect:
                got["sessions"] = expect["sessions"]
        plan_ok = expect == got
    except Exception:
        plan_ok = False
    completeness = Completeness(
        trials_planned=len(data.trials),
        trials_present=sum(1 for t in data.trials if t.present),
        missing=[t.id for t in data.trials if not t.present],
        with_failures=[t.id for t in data.trials if t.present and rows[t.id]["failed"]],
        zero_completed=[t.id for t in data.trials if t.present and rows[t.id]["completed"] == 0],
        unexpected_trials=data.unexpected_trials,
        plan_matches_spec=plan_ok,
        run_status=(data.run_info or {}).get("status"),
        load_problems=data.load_problems,
    )
    ri = data.run_info or {}
    run = RunInfo(run_id=ri.get("run_id"), spec_name=ri.get("spec_name"), spec_sha256=ri.get("spec_sha256"),
                  status=ri.get("status"), created_unix=ri.get("created_unix"))
    spec_info = SpecInfo(
        name=spec.name, title=spec.title, points=list(spec.sweep.points), repeats=repeats,
        order=spec.sweep.order, plan_note=data.plan.get("note"),
        comparisons=[{"a": c.a, "b": c.b} for c in spec.analysis.comparisons],
        latency_metrics=list(spec.analysis.latency_metrics), percentiles=list(spec.analysis.percentiles),
        cv=spec.analysis.cv, slos_ms=dict(sorted(spec.analysis.slos_ms.items())),
        input_len=spec.workload.input_len, output_len=spec.workload.output_len,
    )
    methods = {**METHODS, "metric_definitions": dict(sorted(METRIC_DOCS.items())),
               "percentile_method": PERCENTILE_METHOD, "csv_decimals": CSV_DECIMALS,
               "latency_intervals": LATENCY_INTERVALS}
    dom = dominance(points_l, trials_by, rows, spec)
    arms = arm_comparisons(data, rows)  # None without spec.arms: other analyses have no "arms" key
    if arms:  # these verdicts pool the arms' starts: each says so, and where the verdicts about the points are
        pooled = (f"pooled over the arms {', '.join(arms['arms'])}, which differ by design: the comparison inside "
                  "each arm (arms.within) and the interaction are the verdicts about the points")
        for c in comps + adj:
            c["scope_note"] = f"{c['scope_note']}; {pooled}" if c.get("scope_note") else pooled
            c["statement"] += f"; {pooled}"
    # --until-decided: its decisions, and each decided comparison's sentence extended with its decision
    seq = sequential_record(data.looks, comps + (arms["comparisons"] if arms else [])) if data.looks else None
    attach_intervals(points_l, rows, spec_info.percentiles)  # 95% interval on ln across repeats (or sessions)
    neck = bottleneck_reading(data)  # None without host telemetry: older runs' analysis.json stays as it was
    analysis = Analysis(
        schema=SCHEMA, run=run, spec=spec_info, methods=methods, completeness=completeness,
        trials=[Trial.from_dict(rows[t.id]) for t in sorted(data.trials, key=lambda t: t.index)],
        points=[Point.from_dict(p) for p in points_l],
        comparisons=[Comparison.from_dict(c) for c in comps],
        adjacent=[Comparison.from_dict(c) for c in adj],
        dominance=Dominance.from_dict(dom),
        telemetry=[TelemetryRow.from_dict(x) for x in telemetry],
        within=Within(bin_s=SERIES_BIN_S, trials=[WithinTrial.from_dict(w) for w in within],
                      points=[WithinPoint.from_dict(w) for w in within_points]),
        goodput=Goodput.from_dict(goodput(data, rows, spec)),
        setup=_setup(data),
        variance_components=variance_table(points_l, rows),
        arms=Arms.from_dict(arms) if arms is not None else None,
        sequential=Sequential.from_dict(seq) if seq is not None else None,
        scope=run_scope(data),
        ordering=Ordering.from_dict(ordering(points_l, trials_by, rows, adj, spec)),
        bottleneck=neck,
    )
    texts, kinds = caveats(data, analysis)
    if neck is not None:
        # a declared comparison whose sides read differently, or whose host changed speed, carries it as a caveat
        notes = [(c, n) for c in neck["comparisons"] if c["kind"] == "comparison" for n in c["notes"]]
        texts += [f"Comparison {c['a']} vs {c['b']}: {n}." for c, n in notes]
        # one kind per sentence, as every caveat has (a report selects by kind: a missing one hid them all)
        kinds += [{"kind": "bottleneck", "about": f"{label(c['a'])} vs {label(c['b'])}", "short": None}
                  for c, _ in notes]
    analysis = dataclasses.replace(analysis, caveats=texts, caveat_kinds=kinds)
    # every number as analysis.json holds it (JSON_DECIMALS), then the CSVs write_analysis writes, named
    # without formatting them
    analysis = Analysis.from_dict(round_floats(analysis.to_dict()))
    return dataclasses.replace(analysis, files=["analysis.json"] + csv_names(analysis), unset=analysis.unset - {"files"})


def variance_table(points: list[dict], rows: dict[str, dict]) -> VarianceComponents:
    """Per point, the between- and within-server-start sd of ln(output throughput) with 95% intervals."""
    out = []
    for p in points:
        have = [rows[t] for t in p["trials"] if t in rows and rows[t]["status"] == "present"
                and isinstance(rows[t]["output_throughput"], (int, float)) and rows[t]["output_throughput"] > 0]
        x = [math.log(r["output_throughput"]) for r in have]
        sess = [int(r.get("session") or 1) for r in have]
        out.append(VariancePoint.from_dict({"point": p["point"], **components_of(x, sess)}))
    return VarianceComponents(metric="output_throughput", scale="ln", level=0.95, method=VC_METHOD, points=out)


def sequential_record(looks: list[dict], comps: list[dict]) -> dict:
    """The looks of --until-decided as recorded (looks.jsonl), and each declared comparison's sequential decision:
    its verdict, the look it was decided at, and the repeated confidence interval there (valid at any stop).
    A comparison decided by the looks states that decision beside the fixed-sample test of all its units."""
    rows = [ln for ln in looks if "stop" not in ln]
    stop = next((ln for ln in looks if "stop" in ln), None)
    last: dict[tuple[int, int], dict] = {}
    for ln in rows:
        for r in ln.get("comparisons") or []:
            last[(r.get("a"), r.get("b"), r.get("point"))] = {**r, "at_look": ln.get("look")}
    decisions = []
    for c in comps:
        r = last.get((c["a"], c["b"], c.get("point")))
        if r is None:
            continue
        lk = r.get("look") or {}
        dec = {"a": c["a"], "b": c["b"], **({"point": c["point"]} if "point" in c else {}), "verdict": r.get("verdict"), "decided": r.get("decided"),
               "decided_at_look": r.get("from_look", r.get("at_look")), "unit": lk.get("unit", r.get("unit")),
               "n_units": lk.get("n_units", r.get("n_units")), "scope": lk.get("scope", r.get("scope")),
               "rci": lk.get("rci"), "t": lk.get("t"), "t_boundary": lk.get("t_boundary"),
               "alpha_spent": lk.get("alpha_spent"), "stop_reason": lk.get("stop_reason")}
        rci = dec["rci"]
        m = c.get("margin")
        if (m and dec["verdict"] != "finding" and isinstance(rci, list) and None not in rci and min(rci) > -1
                and all(abs(math.log1p(v)) < math.log1p(m) for v in rci)):
            # a repeated CI covers at every look whatever the stop, so one inside +-margin shows equivalence
            # under the sequential design (Jennison & Turnbull, ch. 9); the looks never stop for it
            dec["verdict"] = "equivalent"
            dec["equivalence"] = f"the repeated CI {interval_text(rci)} lies within +-{m * 100:g}% (valid at any stop)"
        decisions.append(dec)
        c["sequential"] = dec
        if dec["verdict"] in ("finding", "not significant", "equivalent") and dec["verdict"] != c.get("verdict"):
            # the run declared a sequential design: its verdict is the looks' (alpha spent over the looks and split
            # over the comparisons they decide); the fixed-sample test of the same units is kept beside it
            c["fixed_sample_verdict"] = c.get("verdict")
            c["verdict"] = dec["verdict"]
            c["statement"] = (f"{dec['verdict']} under the declared sequential procedure (--until-decided); the "
                              f"fixed-sample test of the same units alone: {c['statement']}")
        c["statement"] += (f"; until-decided: {dec['verdict']} at look {dec['decided_at_look']}"
                           + (f" ({dec['equivalence']})" if dec.get("equivalence") else "")
                           + (" (futility)" if dec["stop_reason"] == "futility" else "")
                           + (f", repeated CI {interval_text(rci)}" if isinstance(rci, list) and None not in rci else "")
                           + (f" over {dec['n_units']} " + {"session": "server starts", "block": "blocks of server "
                                                             "starts"}.get(dec["unit"], "repeats")
                              if dec["n_units"] else ""))
    return {"looks": [{k: ln.get(k) for k in ("look", "max_looks", "max_repeats", "planned_repeats", "repeats",
                                              "all_decided")}
                      | {"comparisons": [{k: r.get(k) for k in ("a", "b", "point", "verdict", "decided", "unit",
                                                                "n_units")}
                                         | {k: (r.get("look") or {}).get(k) for k in
                                            ("t", "t_boundary", "alpha_spent", "rci", "conditional_power")}
                                         for r in ln.get("comparisons") or []]} for ln in rows],
            "stop": stop, "rule": (stop or {}).get("rule"), "decisions": decisions}


def run_scope(data: RunData) -> RunScope:
    """What this run's verdicts can be about, from its design (the server starts its present trials came from)."""
    starts = sorted({int(t.session or 1) for t in data.trials if t.present})
    k = len(starts)
    return RunScope(server_starts=k, scope=scope_of("session" if k > 1 else "repeat", k, k),
                    claim_note=scope_note_of("session" if k > 1 else "repeat", k, k))


def default_out_dir(run_dir: Path) -> Path:
    return Path(run_dir) / ANALYSIS


def write_analysis(res: Analysis | dict, out_dir: Path) -> list[Path]:
    """analysis.json (canonical JSON of the analysis' dict) and every table's CSV, written from its DataFrame
    (evidence.analysis.dataframes)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    from evidence.analysis.dataframes import csv_tables  # pandas, only where tables are written

    analysis = as_analysis(res)
    tables = csv_tables(analysis)
    written = []
    for name in sorted(tables):
        write_atomic(out_dir / name, tables[name])
        written.append(out_dir / name)
    write_atomic(out_dir / "analysis.json", dumps(analysis.to_dict()))
    written.insert(0, out_dir / "analysis.json")
    return written


def analyze_run(run_dir: Path, out_dir: Path | None = None) -> dict:
    """Read the raw run, compute every table, write analysis.json and the CSVs; return the analysis' dict.

    Beside them, when the run has them: profile.json + profile_*.csv (the diagnostic trace
    analyses, evidence.traces.profile) and anchor.json (our client against an interleaved
    anchor client, evidence.analysis.anchor). Each is a pure function of the raw files.
    """
    data = load_run(Path(run_dir))
    analysis = build_analysis(data)
    out = Path(out_dir if out_dir is not None else default_out_dir(run_dir))
    write_analysis(analysis, out)
    write_extras(Path(run_dir), out)
    return analysis.to_dict()


def write_extras(run_dir: Path, out: Path, *, profile: Any = ...) -> list[Path]:
    """profile.json + profile_*.csv and anchor.json, when the run has the raw data for them.

    profile: the run's trace analyses when the caller has them (None: no profile); by default (...)
    they are computed here (evidence.traces.profile.profile_of)."""
    from evidence.analysis.anchor import anchor_comparison
    from evidence.traces.profile import profile_csvs, profile_of

    written = []
    prof = profile_of(Path(run_dir), profile)
    if prof is not None:
        write_atomic(out / TRACE_ANALYSES_JSON, dumps(round_floats(prof)))
        written.append(out / TRACE_ANALYSES_JSON)
        for name, text in sorted(profile_csvs(prof).items()):
            write_atomic(out / name, text)
            written.append(out / name)
    anchor = anchor_comparison(Path(run_dir))
    if anchor is not None:
        write_atomic(out / "anchor.json", dumps(round_floats(anchor)))
        written.append(out / "anchor.json")
    return written
