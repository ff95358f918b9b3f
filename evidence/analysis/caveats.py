"""The caveats: plain sentences about what limits the reading of a run."""

from __future__ import annotations

from evidence.analysis.load import RunData


def caveats(data: RunData, res: dict) -> list[str]:
    spec = data.spec
    out: list[str] = []
    status = (data.run_info or {}).get("status")
    if status != "complete":
        out.append(f"The run's status is {status!r}, not 'complete'." if status else "The run's status is unknown (no run.json).")
    comp = res["completeness"]
    if comp["missing"]:
        out.append(f"{len(comp['missing'])} planned trial(s) are missing: {', '.join(comp['missing'])}; every table "
                   "they affect says so and the affected means use fewer repeats.")
    if comp["with_failures"]:
        out.append("Trials with failed requests: " + ", ".join(comp["with_failures"]) + "; their throughput counts only "
                   "completed requests and is flagged wherever it is used.")
    if comp["zero_completed"]:
        out.append("Trials with no completed request (no throughput): " + ", ".join(comp["zero_completed"]) + ".")
    if comp["unexpected_trials"]:
        out.append("Trial folders not in the plan were ignored: " + ", ".join(comp["unexpected_trials"]) + ".")
    if not comp["plan_matches_spec"]:
        out.append("plan.json differs from the plan the spec gives (make_plan); the recorded plan was used.")
    if spec.sweep.repeats == 1:
        out.append("Single repeat: the noise between repeats is unknown, so no comparison can be decided (no claim).")
    if spec.sweep.order == "fixed":
        out.append("Fixed point order in every repeat: position effects (warm-up, thermal, caches) are confounded "
                   "with the concurrency point.")
    for c in res["comparisons"]:
        if c["verdict"] != "finding":
            out.append(c["statement"][0].upper() + c["statement"][1:] + ".")
        elif c.get("sign_note"):
            out.append(f"{c['name']}: a finding by the t interval only; {c['sign_note']}.")
    for c in res["comparisons"]:
        ss = c.get("sessions")
        if ss:
            out.append(f"{c['name']}: the repeats ran in {ss['sessions']} engine sessions; sd of ln(a/b) within a "
                       f"session {ss['sd_within_log']:.4f}, between sessions {ss['sd_between_log']:.4f} (F-test p "
                       f"{ss['f_p']:.3g}); the test's unit is the {c['unit']} (n = {c['n_units']}).")
    if spec.model.load_format == "dummy":
        note = spec.model.dummy_weights_note or "random weights: timings reflect the architecture, the text is meaningless"
        out.append(f"Dummy weights (--load-format dummy): {note}. Not a measurement of the real model's weights.")
    mism = sum(p["output_len_mismatches"] or 0 for p in res["points"])
    if mism:
        out.append(f"{mism} completed request(s) returned a different number of tokens than max_tokens.")
    for p in res["points"]:
        srv = (p["prompt_tokens"]["server"] or {})
        if srv and (srv.get("min") != spec.workload.input_len or srv.get("max") != spec.workload.input_len):
            rng = f"{srv['min']}" if srv["min"] == srv["max"] else f"{srv['min']}-{srv['max']} (mean {srv['mean']:.2f})"
            out.append(f"Prompt lengths: nominal {spec.workload.input_len} tokens; the server reported {rng} at "
                       f"{p['label']} (templating/tokenization); see the prompt-token table for every point.")
            break
    bad = [p for p in res["setup"]["pins"] if isinstance(p, dict) and p.get("ok") is False]
    if bad:
        out.append("Pins that did not hold (run with drift allowed): " + "; ".join(
            f"{p.get('pin')}: requested {p.get('requested')!r}, effective {p.get('effective')!r}" for p in bad) + ".")
    # Resolved VALUES are compared, not their records: a restart that quotes a longer log line as the
    # source of the same value changed nothing.
    val = lambda v: v.get("value") if isinstance(v, dict) and "value" in v else v  # noqa: E731
    changed = {d["name"]: d for d in res["setup"]["engine_resolved_changes"] if val(d["first"]) != val(d["this"])}
    if changed:
        out.append("The engine was restarted and resolved some settings to different values: " + "; ".join(
            f"{k}: {val(d['first'])!r} -> {val(d['this'])!r} ({d['file']})" for k, d in sorted(changed.items())) + ".")
    if data.profile_files or spec.profile.enabled:
        out.append("Profiling is diagnostic only: traces come from a separate, shorter workload under a profiler, "
                   "never from the measured trials; their numbers do not reconstruct the throughput tables.")
    out.extend(_within_caveats(res))
    for d in res["dominance"]["pairs"]:
        if d["verdict"] != "finding":
            out.append(d["verdict_statement"][0].upper() + d["verdict_statement"][1:] + ".")
        if d["held_in_repeats"] < d["repeats_planned"]:
            out.append(f"{d['statement']} on the means, but per repeat only in {d['held_in_repeats']} of "
                       f"{d['repeats_planned']} planned repeat(s).")
    if res["ordering"]["statement"] and not res["ordering"]["held_in_every_repeat"]:
        out.append(f"The ordering {res['ordering']['statement']} (from means) held in {res['ordering']['held_in_repeats']} "
                   f"of {res['ordering']['repeats_planned']} repeats.")
    return out


def _within_caveats(res: dict) -> list[str]:
    """No steady state, waves, regimes: what one number per trial hides, with the numbers."""
    out = []
    trials = [w for w in res["within"]["trials"] if w["status"] == "present"]
    drift = [w for w in trials if w["steady"]["needed_s"] is not None]
    if drift:
        longest = max(drift, key=lambda w: w["steady"]["needed_s"])
        out.append(f"No steady state in {len(drift)} of {len(trials)} trials ({', '.join(w['trial'] for w in drift)}): "
                   f"the throughput drifts through the window, so its mean is not a level. {longest['trial']}: "
                   f"{longest['steady']['note']}.")
    short = [w["trial"] for w in trials if not w["steady"]["steady"] and w["steady"]["needed_s"] is None]
    if short:
        out.append(f"Too short to tell whether a steady state exists: {', '.join(short)} (the full-concurrency part "
                   "holds too few 0.25 s bins for MSER-5 and the trend test).")
    wavy = [w for w in trials if w["waves"]]
    if wavy:
        per = "; ".join(f"{w['trial']}: {w['waves']['note'].replace('throughput moves in waves: ', '')}" for w in wavy[:3])
        out.append(f"Throughput moves in waves within {len(wavy)} of {len(trials)} trials (per-trial figure and "
                   f"timeseries.csv): {per}" + ("; ..." if len(wavy) > 3 else "") + ".")
    for p in res["within"]["points"]:
        if p["regimes"]:
            out.append(f"C{p['point']}: {p['regimes']['note']}.")
    return out
