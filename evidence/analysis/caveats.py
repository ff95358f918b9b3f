"""The caveats: plain sentences about what limits the reading of a run.

`caveats(data, analysis)` returns the sentences (analysis.json "caveats") and, beside them ("caveat_kinds"),
one {kind, about, short} per sentence in the same order: what the caveat is about
(a kind from CAVEAT_KINDS; `about` names the comparison, dominance pair or point it concerns, else null) and,
where the sentence is long, a one-line form with the same numbers. A report selects and orders caveats by
these fields, never by parsing the sentences.
"""

from __future__ import annotations

from evidence.analysis.load import RunData
from evidence.analysis.model import Analysis, DominancePair, Pin, Steady
from evidence.analysis.numbers import label

# Every kind a caveat can have. A kind that restates a verdict line (comparison_verdict, dominance_verdict,
# dominance_repeats, ordering_repeats) carries `about` so a report can tell which line it restates.
CAVEAT_KINDS = ("run_status", "missing_trials", "failed_requests", "zero_completed", "unexpected_trials",
                "plan_mismatch", "single_repeat", "fixed_order", "comparison_verdict", "sign_only",
                "session_variance", "sessions_same", "dummy_weights", "output_len_mismatch", "prompt_lengths",
                "pins_drift", "engine_restart_values", "session_split", "sessions_not_restarted", "profile_diagnostic", "no_steady_state", "too_short_steady",
                "waves", "regimes", "dominance_verdict", "dominance_repeats", "ordering_repeats",
                "bottleneck")


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def _names(xs: list[str], k: int = 3) -> str:
    return ", ".join(xs[:k]) + (f" and {len(xs) - k} more" if len(xs) > k else "")


def pair_about(d: DominancePair | dict) -> str:
    """The `about` of a dominance pair's caveats (analysis dominance.pairs[]): "C128 over C256"."""
    if isinstance(d, DominancePair):
        return f"{label(d.dominant)} over {label(d.dominated)}"
    return f"{label(d['dominant'])} over {label(d['dominated'])}"


def caveats(data: RunData, res: Analysis) -> tuple[list[str], list[dict]]:
    """The sentences, and their {kind, about, short} in the same order (analysis.json caveats, caveat_kinds)."""
    entries = caveat_entries(data, res)
    return [e["text"] for e in entries], [{"kind": e["kind"], "about": e["about"], "short": e["short"]} for e in entries]


def caveat_entries(data: RunData, res: Analysis) -> list[dict]:
    """Each caveat as {kind, about, text, short}; short is None where the text is already one short line."""
    spec = data.spec
    out: list[dict] = []

    def add(kind: str, text: str, short: str | None = None, about: str | None = None) -> None:
        out.append({"kind": kind, "about": about, "text": text, "short": short})

    status = (data.run_info or {}).get("status")
    if status != "complete":
        add("run_status", f"The run's status is {status!r}, not 'complete'." if status
            else "The run's status is unknown (no run.json).")
    comp = res.completeness
    if comp.missing:
        add("missing_trials", f"{len(comp.missing)} planned trial(s) are missing: {', '.join(comp.missing)}; "
            "every table they affect says so and the affected means use fewer repeats.",
            f"{len(comp.missing)} planned trial(s) missing: {_names(comp.missing)}.")
    if comp.with_failures:
        add("failed_requests", "Trials with failed requests: " + ", ".join(comp.with_failures) + "; their "
            "throughput counts only completed requests and is flagged wherever it is used.",
            f"Failed requests in {_names(comp.with_failures)}: their throughput counts completed requests only.")
    if comp.zero_completed:
        add("zero_completed", "Trials with no completed request (no throughput): "
            + ", ".join(comp.zero_completed) + ".",
            f"No completed request (no throughput) in {_names(comp.zero_completed)}."
            if len(comp.zero_completed) > 3 else None)
    if comp.unexpected_trials:
        add("unexpected_trials", "Trial folders not in the plan were ignored: " + ", ".join(comp.unexpected_trials)
            + ".", f"Trial folders not in the plan were ignored: {_names(comp.unexpected_trials)}."
            if len(comp.unexpected_trials) > 3 else None)
    if not comp.plan_matches_spec:
        add("plan_mismatch", "plan.json differs from the plan the spec gives (make_plan); the recorded plan was used.")
    if spec.sweep.repeats == 1:
        add("single_repeat", "Single repeat: the noise between repeats is unknown, so no comparison can be decided "
            "(no claim).")
    if spec.sweep.order == "fixed":
        add("fixed_order", "Fixed point order in every repeat: position effects (warm-up, thermal, caches) are "
            "confounded with the concurrency point.",
            "Fixed point order: position effects are confounded with the concurrency point.")
    for c in res.comparisons:
        if c.verdict != "finding":
            ci = c.ci95
            short = (f"{c.name}: {c.verdict} ({_pct(c.effect)}, 95% CI {_pct(ci[0])} to {_pct(ci[1])}"  # type: ignore[arg-type]
                     + (f"; smallest detectable {abs(c.mde) * 100:.1f}%" if c.mde is not None else "")
                     + ")." if isinstance(ci, list) and None not in ci and c.effect is not None else None)
            add("comparison_verdict", c.statement[0].upper() + c.statement[1:] + ".", short, c.name)
        elif c.sign_note:
            add("sign_only", f"{c.name}: a finding by the t interval only; {c.sign_note}.", about=c.name)
    for c in res.comparisons:
        ss = c.sessions
        if ss:
            # the unit is the server start whatever the F-test says (fixed by the design); the kind says which
            differ = ss.f_p is not None and ss.f_p < 0.05
            add("session_variance" if differ else "sessions_same",
                f"{c.name}: the repeats ran in {ss.sessions} server starts (engine sessions); sd of ln(a/b) "
                f"within a start {ss.sd_within_log:.4f}, between starts {ss.sd_between_log:.4f} (F-test p "
                f"{ss.f_p:.3g}); the test's unit is the {'server start' if c.unit == 'session' else c.unit} "
                f"(n = {c.n_units}), fixed by the design.",
                (f"{c.name}: the {ss.sessions} server starts differ (F-test p {ss.f_p:.3g}); the test's "
                 f"unit is the server start (n = {c.n_units})." if differ else
                 f"{c.name}: {ss.sessions} server starts, no difference between them shown (F-test p "
                 f"{ss.f_p:.3g}); the unit is still the server start (n = {c.n_units})."), c.name)
    if spec.model.load_format == "dummy":
        note = spec.model.dummy_weights_note or "random weights: timings reflect the architecture, the text is meaningless"
        add("dummy_weights", f"Dummy weights (--load-format dummy): {note}. Not a measurement of the real model's "
            "weights.", "Dummy weights (--load-format dummy): not a measurement of the real model's weights.")
    mism = sum(p.output_len_mismatches or 0 for p in res.points)
    if mism:
        add("output_len_mismatch", f"{mism} completed request(s) returned a different number of tokens than max_tokens.")
    for p in res.points:
        srv = p.prompt_tokens.server or {}
        if srv and (srv.get("min") != spec.workload.input_len or srv.get("max") != spec.workload.input_len):
            rng = f"{srv['min']}" if srv["min"] == srv["max"] else f"{srv['min']}-{srv['max']} (mean {srv['mean']:.2f})"
            add("prompt_lengths", f"Prompt lengths: nominal {spec.workload.input_len} tokens; the server reported "
                f"{rng} at {p.label} (templating/tokenization); see the prompt-token table for every point.",
                f"Prompt lengths: nominal {spec.workload.input_len} tokens; the server reported {rng} at {p.label}.",
                p.label)
            break
    bad = [p for p in res.setup.pins if isinstance(p, Pin) and p.ok is False]
    if bad:
        add("pins_drift", "Pins that did not hold (run with drift allowed): " + "; ".join(
            f"{p.pin}: requested {p.requested!r}, effective {p.effective!r}" for p in bad) + ".",
            f"{len(bad)} pin(s) did not hold (drift allowed): {_names([str(p.pin) for p in bad])}.")
    inputs = [c for r in ((data.run_info or {}).get("inputs_changed") or []) if isinstance(r, dict)
              for c in (r.get("changes") or []) if isinstance(c, dict)]
    if inputs:  # resumed with --allow-drift after the harness code or the tokenizer changed
        add("pins_drift", "Resumed after what the results depend on changed (drift allowed): " + "; ".join(
            f"{c.get('input')}: {str(c.get('recorded'))[:12]}... -> {str(c.get('now'))[:12]}..." for c in inputs)
            + ". Trials before and after the change may not be comparable.",
            f"Resumed after {len(inputs)} input(s) changed (drift allowed): "
            f"{_names([str(c.get('input')).split(' (')[0] for c in inputs])}.")
    # Resolved VALUES are compared, not their records: a restart that quotes a longer log line as the
    # source of the same value changed nothing.
    val = lambda v: v.get("value") if isinstance(v, dict) and "value" in v else v  # noqa: E731
    changed = {d.name: d for d in res.setup.engine_resolved_changes if val(d.first) != val(d.this)}
    if changed:
        first = sorted(changed)[0]
        add("engine_restart_values", "The engine was restarted and resolved some settings to different values: "
            + "; ".join(f"{k}: {val(d.first)!r} -> {val(d.this)!r} ({d.file})"
                        for k, d in sorted(changed.items())) + ".",
            f"After an engine restart {len(changed)} resolved setting(s) differ: {first} "
            f"{val(changed[first].first)!r} -> {val(changed[first].this)!r}"
            + (f" and {len(changed) - 1} more" if len(changed) > 1 else "") + ".")
    split = {k: v for k, v in sorted(data.session_starts.items()) if len(v) > 1}
    for k, befores in split.items():  # a resume restarted the engine inside a planned session
        add("session_split", f"Server start {k} was cut by a resume: its trials ran on {len(befores)} engine starts "
            f"(started before {', '.join(befores)}). The analysis counts them as the one start the plan made, so a "
            "comparison inside that start also holds the difference between two starts (and hosts, when the "
            "resume ran elsewhere).",
            f"Server start {k} ran on {len(befores)} engine starts (a resume restarted it).")
    starts = sorted({int(t.session or 1) for t in data.trials if t.present})
    if len(starts) > 1 and not spec.engine.starts_server:  # an endpoint: its sessions are blocks of one server
        add("sessions_not_restarted", f"The endpoint's server was not started, and so not restarted, by this tool: "
            f"its {len(starts)} sessions are blocks of one server. The verdicts' unit is the session and their scope "
            f"reads 'these {len(starts)} server starts', but the variance between server starts was not sampled: "
            "they are about that server as it ran, not about the configuration.",
            f"The {len(starts)} sessions are blocks of one endpoint server, not server starts.")
    if data.profile_files or spec.profile.enabled:
        add("profile_diagnostic", "Profiling is diagnostic only: traces come from a separate, shorter workload under "
            "a profiler, never from the measured trials; their numbers do not reconstruct the throughput tables.",
            "Profiling is diagnostic only: traces come from a separate workload, never from the measured trials.")
    out.extend(_within_caveats(res))
    for d in res.dominance.pairs:
        pair = pair_about(d)
        if d.verdict != "finding":
            add("dominance_verdict", d.verdict_statement[0].upper() + d.verdict_statement[1:] + ".", about=pair)
        if d.held_in_repeats < d.repeats_planned:
            add("dominance_repeats", f"{d.statement} on the means, but per repeat only in {d.held_in_repeats} "
                f"of {d.repeats_planned} planned repeat(s).", about=pair)
    o = res.ordering
    if o.statement and not o.held_in_every_repeat:
        add("ordering_repeats", f"The ordering {o.statement} (from means) held in "
            f"{o.held_in_repeats} of {o.repeats_planned} repeats.")
    return out


def _within_caveats(res: Analysis) -> list[dict]:
    """No steady state, waves, regimes: what one number per trial hides, with the numbers."""
    out: list[dict] = []
    trials = [(w, w.steady or Steady()) for w in res.within.trials if w.status == "present"]
    drift = [(w, st) for w, st in trials if st.needed_s is not None]
    if drift:
        longest, lst = max(drift, key=lambda x: x[1].needed_s or 0.0)
        out.append({"kind": "no_steady_state", "about": None, "text":
                    f"No steady state in {len(drift)} of {len(trials)} trials ({', '.join(w.trial for w, _ in drift)}): "
                    f"the throughput drifts through the window, so its mean is not a level. {longest.trial}: "
                    f"{lst.note}.",
                    "short": f"No steady state in {len(drift)} of {len(trials)} trials: their mean throughput is "
                             "not a level."})
    short = [w.trial for w, st in trials if not st.steady and st.needed_s is None]
    if short:
        out.append({"kind": "too_short_steady", "about": None, "text":
                    f"Too short to tell whether a steady state exists: {', '.join(short)} (the full-concurrency part "
                    "holds too few 0.25 s bins for MSER-5 and the trend test).",
                    "short": f"Too short to tell whether a steady state exists: {_names(short)}."})
    wavy = [w for w, _ in trials if w.waves]
    if wavy:
        per = "; ".join(f"{w.trial}: {(w.waves or {})['note'].replace('throughput moves in waves: ', '')}"
                        for w in wavy[:3])
        out.append({"kind": "waves", "about": None, "text":
                    f"Throughput moves in waves within {len(wavy)} of {len(trials)} trials (per-trial figure and "
                    f"timeseries.csv): {per}" + ("; ..." if len(wavy) > 3 else "") + ".",
                    "short": f"Throughput moves in waves within {len(wavy)} of {len(trials)} trials (see the "
                             "per-trial figure)."})
    for p in res.within.points:
        if p.regimes:
            out.append({"kind": "regimes", "about": label(p.point), "text": f"C{p.point}: {p.regimes['note']}.",
                        "short": None})
    return out
