"""The report: report/report.md and a self-contained report/report.html.

Everything is a pure function of the raw run (through `evidence.analysis` and
`evidence.figures`, computed in memory) and of the templates: no timestamps
of "now", dates only from raw data (run.json, trial meta), no network. The
HTML embeds figures as base64 PNG and its CSS inline. Numbers are formatted
here, once, so that templates only place strings (jinja2 StrictUndefined: a
missing value is an error, never an empty cell).

Templates are found in this order: the `templates_dir` argument, the
EVIDENCE_TEMPLATES environment variable, the repository's top-level
`templates/` next to the package, then `evidence/templates/` (package data).

Profiling: when the run holds a diagnostic profile (profile/), the report adds a
"Profiling (diagnostic)" section from `evidence.traces.profile`; nothing else
depends on it. Formatting helpers live in `evidence.report.format`.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

from evidence.resources import TEMPLATES
from evidence.analysis.analyze import METHODS, compute_analysis
from evidence.analysis.load import RunData, load_run
from evidence.analysis.model import Analysis, EngineChange, Pin, Steady, as_analysis
from evidence.analysis.numbers import label
from evidence.analysis.tables import CSV_DECIMALS
from evidence.canon import write_atomic
from evidence.figures import figure_bytes, render_environment
from evidence.metrics import HEADLINE_METRICS, METRIC_DOCS
from evidence.report.bottleneck import bottleneck_sections
from evidence.report.format import fixed, join_flags, num, pct, provenance_rows, section, table, text, utc
from evidence.report.sanitize import CSP
from evidence.report.layout import (bottom_line, bottom_line_more, comparison_summary_table, geometry_rows, headline,
                                    latency_concurrency_table)
from evidence.rundir import PROVENANCE_JSON, REPORT
from evidence.report.verdicts import (arms_tables, comparison_tables, dominance_tables, latency_point_table,
                                      looks_tables, side_by_side_tables, variance_tables)

TEMPLATE_NAMES = ("report.md.j2", "report.html.j2")
FIGURE_TITLES = {
    "throughput_vs_concurrency": "Output throughput vs concurrency: mean line, every repeat as a marker (with several "
                                 "server starts, one colour per start and one shape per arm)",
    "latency_vs_concurrency": "Latency against concurrency: p50 and p99 of each metric, the mean over repeats with "
                              "its 95% t interval (n - 1 df; the engine session as the unit when sessions differ; no "
                              "bar below 2 units), every trial's own value as a dot beside its bar",
    "latency_vs_throughput": "Latency vs throughput operating points, the point means joined in increasing concurrency "
                             "(arrows: the knee is where latency climbs while throughput stops); dominated points "
                             "crossed out",
    "latency_ecdf": "TTFT and TPOT distributions per point (ECDF, repeats pooled; log axes ticked 1-2-5 with units)",
    "telemetry": "Server-reported running and waiting requests over time, per trial",
    "user_vs_total_throughput": "Output tokens/s per user (per request) against total output tokens/s, one marker "
                                "per point labelled with its concurrency, joined in increasing concurrency",
    "throughput_over_time": "Output throughput and requests in flight over time, per trial, steady-state window shaded",
    "host_over_time": "The engine's processes' CPU (cores, by role), the client's, GPU busy and output throughput over "
                      "time, per trial, with its bottleneck reading",
}


# Figures the layout places by name (the headline, latency, trade-off, distributions, telemetry); any other
# figure the figures stage renders (per-trial time series, ...) joins the "Within each trial" section.
PLACED_FIGURES = ("throughput_vs_concurrency", "user_vs_total_throughput", "latency_vs_concurrency",
                  "latency_vs_throughput", "latency_ecdf", "telemetry", "host_over_time")


class TemplateNotFound(FileNotFoundError):
    pass


def find_templates(templates_dir: Path | None = None) -> Path:
    cands: list[Path] = []
    if templates_dir is not None:
        cands.append(Path(templates_dir))
    if os.environ.get("EVIDENCE_TEMPLATES"):
        cands.append(Path(os.environ["EVIDENCE_TEMPLATES"]))
    cands.append(TEMPLATES)
    for c in cands:
        if all((c / n).is_file() for n in TEMPLATE_NAMES):
            return c
    raise TemplateNotFound("the report templates (report.md.j2, report.html.j2) were not found in "
                           + ", ".join(str(c) for c in cands)
                           + "; pass templates_dir or set EVIDENCE_TEMPLATES to the folder that holds them.")


# ---------------------------------------------------------------- formatting ----


# ------------------------------------------------------------------ sections ----


def _setup_tables(data: RunData, a: Analysis) -> list[dict]:
    s = data.spec
    w, sw = s.workload, s.sweep
    rows = [
        ("experiment", f"{s.name}: {s.title}"),
        ("model", s.model.id + (f" @ {s.model.revision}" if s.model.revision else " (no revision pinned)")),
        ("weights", "dummy (random; --load-format dummy)" if s.model.load_format == "dummy" else s.model.load_format),
        ("engine (spec)", f"{s.engine.kind} {s.engine.version or '(any version)'}"),
        ("hardware (spec)", f"{s.hardware.count} x {s.hardware.accelerator}" if s.hardware.accelerator
         else "no accelerator expected" + (f" ({s.hardware.notes})" if s.hardware.notes else "")),
        ("engine arguments (spec; unset ones are left to the engine)",
         ", ".join(f"{k}={v}" for k, v in sorted(s.engine.args.model_dump().items()) if v is not None and v != [])),
        ("workload", f"{w.dataset}, {w.input_len} input / {w.output_len} output tokens (nominal), request_rate "
                     f"{w.request_rate}, seed {w.seed}, ignore_eos {w.ignore_eos}, prompts as {w.prompt_form}"),
        ("points (max concurrency)", ", ".join(f"{label(p)} ({sw.prompts_at(p)} prompts)" for p in sw.points)),
        ("repeats and order", f"{sw.repeats}, {sw.order}: {data.plan.get('note', '')}"),
        ("warm-up", f"{sw.warmup.requests} request(s), {sw.warmup.when}" if sw.warmup.requests else "none"),
        ("cool-down between trials", f"{sw.cooldown_s:g} s"),
        ("analysis", f"latency metrics {', '.join(s.analysis.latency_metrics)}; percentiles "
                     f"{', '.join(f'{p:g}' for p in s.analysis.percentiles)}; CV with {s.analysis.cv} std"
                     + (f"; SLOs (ms) {json.dumps(dict(sorted(s.analysis.slos_ms.items())))}" if s.analysis.slos_ms else "")),
    ]
    out = [table("Experiment (from spec.resolved.json)", ["setting", "value"], rows, "ll")]
    prov = data.provenance or {}
    prow = provenance_rows(prov)
    if prow:
        later = a.setup.provenance_files[1:]
        out.append(table("Environment found (provenance.json" + (f"; after engine restarts also {', '.join(later)}"
                                                                 if later else "") + ")", ["item", "value"], prow, "ll"))
    elif not prov:
        out.append(table("Environment found", ["item", "value"], [(PROVENANCE_JSON, "absent from the run")], "ll"))
    er = a.setup.engine_resolved
    if isinstance(er, dict) and er:
        rows = []
        for k in sorted(er):
            v = er[k]
            if isinstance(v, dict) and "value" in v:
                req = text(v["requested"]) if "requested" in v else ""
                src = text(v.get("source")) + (f"; {v['also']}" if v.get("also") else "")
                rows.append((k, text(v.get("value")), req, src))
            else:
                rows.append((k, text(v), "", "n/a"))
        # A restart is compared on resolved VALUES; a source that quotes a longer log line changes nothing.
        val = lambda v: v.get("value") if isinstance(v, dict) and "value" in v else v  # noqa: E731
        changes = [c for c in a.setup.engine_resolved_changes if isinstance(c, EngineChange)]
        moved = [c for c in changes if val(c.first) != val(c.this)]
        same = sorted({c.name for c in changes if val(c.first) == val(c.this)})
        note = ("After an engine restart these settings resolved to different values: " + "; ".join(
            f"{c.name}: {text(val(c.first))} -> {text(val(c.this))} ({c.file})" for c in moved) + ". "
            if moved else "")
        note += (f"After an engine restart {', '.join(same)} resolved to the same values; only the log line quoted "
                 "as their source differs. " if same else "")
        out.append(table("What the engine resolved (engine/resolved.json): scheduler and memory settings, what the "
                         "spec asked for, and where each value was read", ["setting", "value", "requested", "source"],
                         rows, "llll", note + "requested: what the spec asked for (empty: left to the engine); "
                         "source: the server log line or engine default each value was read from."))
    pins = a.setup.pins
    if pins:
        out.append(table("Pins: requested by the spec vs effective in the environment",
                         ["pin", "requested", "effective", "holds", "note"],
                         [(text(p.pin), text(p.requested), text(p.effective),
                           "yes" if p.ok else "NO", text(p.note) if p.note else "")
                          for p in pins if isinstance(p, Pin)], "lllll"))
    order_rows = []
    by_rep: dict[int, list] = {}
    for t in a.trials:
        by_rep.setdefault(t.repeat, []).append(t)
    for r in sorted(by_rep):
        ts = sorted(by_rep[r], key=lambda t: t.position)
        order_rows.append((f"repeat {r}", " -> ".join(label(t.point) + ("" if t.present else " (missing)")
                                                   for t in ts)))
    out.append(table("Execution order (plan.json)", ["repeat", "points in the order they ran"], order_rows, "ll"))
    return out


def _points_table(a: Analysis) -> dict:
    kind = a.spec.cv
    wp = {w.point: w for w in a.within.points}
    rows = []
    for p in a.points:
        tp = p.output_throughput
        w = wp[p.point]
        rows.append((p.label, num(tp.mean), num(w.steady_throughput_mean), f"{w.steady_trials}/{w.trials}",
                     pct(tp.cv), num(tp.min), num(tp.max), pct(tp.rel_range),
                     f"{p.repeats_measured}/{p.repeats_planned}", num(p.request_throughput.mean, 3),
                     num(p.failed), num(p.output_len_mismatches),
                     join_flags(p.flags + [f"{k}: {v}" for k, v in sorted(p.absent.items())])))
    return table(f"Output throughput per point over repeats (tok/s; CV = {kind} std / mean; range = (max - min) / mean)",
                 ["point", "mean tok/s", "steady-state tok/s", "steady trials", f"CV ({kind})", "min", "max", "range",
                  "repeats", "req/s", "failed req.", "len. mism.", "flags"], rows, "lrrrrrrrrrrrl",
                 "mean tok/s: whole-trial throughput (first send to last completion), mean over repeats. "
                 "steady-state tok/s: mean over repeats of each trial's throughput inside its steady-state window "
                 "(MSER-5 start, full-concurrency end); steady trials: trials whose window shows no trend (the trials table "
                 "says, per trial, the drift the trend test would have seen with 80% power). "
                 "min / max: the slowest and fastest repeat. repeats: measured / planned. req/s: completed requests "
                 "per second, mean over repeats. failed req.: requests that ended in an error, summed over repeats "
                 "(a trial's throughput counts only completed ones). len. mism.: completed requests whose "
                 "usage.completion_tokens differs from max_tokens (under ignore_eos it should not).")


def _prompt_table(a: Analysis) -> dict:
    rows = []
    for p in a.points:
        pt = p.prompt_tokens
        srv = pt.server or {}
        rows.append((p.label, num(pt.input_len_nominal), num(pt.nominal_mean),
                     num(srv.get("min")), num(srv.get("max")), num(srv.get("mean")), num(p.chunk_usage_mismatches)))
    return table("Prompt tokens: nominal (what the workload asked for) vs what the server reported (usage.prompt_tokens)",
                 ["point", "nominal", "sent (mean)", "server min", "server max", "server mean",
                  "chunk != usage count"], rows, None,
                 "nominal: the workload's input_len; sent (mean): the prompt lengths the load generator built, by its "
                 "tokenizer; server min/max/mean: usage.prompt_tokens as the server counted them (chat templates and "
                 "tokenization add or merge tokens). chunk != usage count: completed requests whose number of "
                 "streamed chunks differs from the server's usage.completion_tokens (a server may pack several "
                 "tokens in one chunk; then ITL is per chunk, not per token).")


def _telemetry_table(a: Analysis) -> dict:
    rows = []
    for t in a.telemetry:
        if t.status != "present":
            rows.append((t.trial, num(t.position), "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", t.absent))
            continue
        su, mx, de = t.sustained, t.max, t.delta  # per gauge, named by the engine adapter
        rows.append((t.trial, num(t.position), num(su["running"], 1), num(su["waiting"], 1),
                     num(su["kv_cache_usage"], 4), num(mx["running"], 0), num(mx["waiting"], 0),
                     num(de["preemptions"], 0), num(t.samples),
                     join_flags([f"{k}: {v}" for k, v in sorted(t.absent_keys.items())])))
    return table("Engine telemetry per trial: sustained = median over the plateau window (ramp-up and drain excluded)",
                 ["trial", "position", "running (sust.)", "waiting (sust.)", "KV cache use (sust.)", "running max",
                  "waiting max", "preemptions", "samples", "absent"], rows, "lrrrrrrrrl", METHODS["telemetry_plateau"]
                 + ". KV cache use is as the server reports it (vLLM: a fraction 0-1).")


def _goodput_tables(a: Analysis) -> tuple[list[str], list[dict]]:
    g = a.goodput
    if g.absent:
        return [g.absent + "."], []
    rows = [(t.trial, num(t.position), num(t.requests), num(t.meeting), num(t.undetermined),
             pct(t.attainment), num(t.goodput_rps, 4), join_flags(t.flags + ([t.absent] if t.absent else [])))
            for t in g.trials]
    prow = [(label(p.point), num(p.n), num(p.goodput_rps_mean, 4), pct(p.attainment_mean), join_flags(p.flags))
            for p in g.points]
    slo = ", ".join(f"{k} <= {v:g} ms" for k, v in g.slos_ms.items())
    return ([f"SLOs: {slo}. {METHODS['goodput']}."],
            [table("Goodput per point (mean over repeats)", ["point", "repeats", "goodput req/s", "attainment", "flags"],
                   prow, "lrrrl"),
             table("Goodput per trial", ["trial", "position", "requests", "meeting SLOs", "undetermined", "attainment",
                                         "goodput req/s", "flags"], rows, "lrrrrrrl")])


def _trials_table(a: Analysis) -> dict:
    rows = []
    within = {w.trial: w for w in a.within.trials}
    for t in a.trials:
        lat = t.latency or {}  # metric -> statistic -> ms
        st = within[t.id].steady or Steady()
        window = (f"{num(st.throughput)} ({st.start_s:.2f}-{st.end_s:.2f} s"
                  + ((f"; no trend, a ±{100 * st.detectable_drift:.1f}% drift would show"
                      if st.detectable_drift is not None else "") if st.steady else
                     ", no steady state" if st.needed_s else ", too short to tell") + ")"
                  if st.throughput is not None else "n/a")
        rows.append((t.id, num(t.repeat), label(t.point), num(t.position), t.status, num(t.requests),
                     num(t.completed), num(t.failed), num(t.duration_s, 3), num(t.output_throughput), window,
                     *[num((lat.get(m) or {}).get("mean"), 2) for m in HEADLINE_METRICS],
                     pct(t.client_cpu_util, d=0) if t.client_cpu_util is not None else "n/a",
                     join_flags(t.flags)))
    return table("Every trial, in execution order", ["trial", "repeat", "point", "position", "status", "requests",
                                                     "completed", "failed", "duration s", "tok/s",
                                                     "steady-state tok/s (window)",
                                                     *[f"mean {m.upper()} ms" for m in HEADLINE_METRICS],
                                                     "client CPU", "flags"],
                 rows, "lrlrlrrrrrr" + "r" * len(HEADLINE_METRICS) + "rl",
                 "client CPU: the load generator's CPU time / trial wall time (meta.json); near 100% the client, "
                 "not the server, may limit throughput.")


def _dates(data: RunData) -> str:
    t0s = [t.meta.get("t0_unix") for t in data.trials if t.meta and isinstance(t.meta.get("t0_unix"), (int, float))]
    ends = [t.meta.get("ended_unix") for t in data.trials if t.meta and isinstance(t.meta.get("ended_unix"), (int, float))]
    parts = []
    created = utc((data.run_info or {}).get("created_unix"))
    if created:
        parts.append(f"run created {created}")
    if t0s:
        parts.append(f"first trial started {utc(min(t0s))}")
    if ends:
        parts.append(f"last trial ended {utc(max(ends))}")
    return "; ".join(parts) if parts else "no dates recorded in the raw data"


# ------------------------------------------------------------------- context ----


def build_context(run_dir: Path, data: RunData, res: Analysis | dict, figs: dict[str, bytes],
                  figures_rel: str = "../figures", profile: Any = ...) -> dict:
    spec = data.spec
    a = as_analysis(res)
    have = [n[: -len(".png")] for n in figs if n.endswith(".png")]
    # A figure the layout does not place by name shows without a change here: one about latency against
    # concurrency beside that table, any other (per-trial time series...) in the within-trial section.
    unplaced = [n for n in have if n not in PLACED_FIGURES]
    lat = [n for n in have if n == "latency_vs_concurrency" or (n in unplaced and "latency" in n and "concurrency" in n)]
    extra = [n for n in unplaced if n not in lat]
    # Reading order: the answer and the few figures and tables that carry it first (about five screens at 1366 px
    # wide); everything else in appendices, collapsed in the HTML (<details>), in the order below.
    sections = []
    sections.append(section("user-throughput", "Per-user against total throughput", figures=[
        n for n in ("user_vs_total_throughput",) if n in have], paragraphs=[
        "Each point's mean output tokens/s per user (per request: its output tokens over its send-to-last-token "
        "time) against its total output tokens/s: where the total stops growing while each user's rate keeps "
        "falling is the knee. Computed from the raw records."]))
    sections.append(section("latency", "Latency against concurrency", tables=[latency_concurrency_table(a)],
                            figures=lat))
    summary = comparison_summary_table(a)
    sections.append(section("paired", "Paired comparisons", tables=([summary] if summary else []) + arms_tables(a),
                            paragraphs=[] if a.comparisons else
                            ["The spec names no comparison (analysis.comparisons); see the ordering in the appendix "
                             "'Throughput against latency'."]))
    sections.append(section("throughput", "Throughput per point", tables=[_points_table(a)] + variance_tables(a)))
    head = headline(a)
    # every caveat, in analysis order, as a short item with its full text behind a toggle (bullets: the full text,
    # for the markdown)
    sections.append(dict(section("all-caveats", "All caveats", bullets=head["caveats_all"], paragraphs=[
        "Every caveat the analysis found (analysis.json caveats); open one for its full text. The headline shows "
        "the most consequential ones and leaves out those that restate a verdict line."] if head["caveats_all"] else
        ["None found in the data."]), toggles=head["caveat_items_all"]))
    sections.append(section("paired-full", "Paired comparisons in full", appendix=True,
                            tables=comparison_tables(a) + looks_tables(a),
                            paragraphs=[METHODS["paired_test"] + ".", METHODS["multiplicity"] + ".",
                                        METHODS["verdict"] + "."] if a.comparisons else
                            ["The spec names no comparison (analysis.comparisons)."]))
    sections.append(section("timeseries", "Within each trial: throughput and requests over time", appendix=True,
                            figures=extra + [n for n in ("telemetry",) if n in have], tables=[_telemetry_table(a)]))
    sections.append(section("tradeoff", "Throughput against latency", tables=dominance_tables(a), appendix=True,
                            figures=[n for n in ("latency_vs_throughput",) if n in have]))
    sections.append(section("distributions", "Latency distributions", appendix=True,
                            tables=side_by_side_tables(a) + [latency_point_table(a)],
                            figures=[n for n in ("latency_ecdf",) if n in have]))
    gp, gt = _goodput_tables(a)
    sections.append(section("goodput", "SLO goodput", paragraphs=gp, tables=gt, appendix=True))
    sections.append(section("trials", "Trials", tables=[_trials_table(a), _prompt_table(a)], appendix=True))
    sections.extend(dict(x, appendix=True) for x in _profile_sections(run_dir, profile) + _anchor_sections(run_dir)
                    + bottleneck_sections(a, have))
    c = a.completeness
    comp_rows = [("trials planned", num(c.trials_planned)), ("trials recorded", num(c.trials_present)),
                 ("missing", ", ".join(c.missing) or "none"),
                 ("with failed requests", ", ".join(c.with_failures) or "none"),
                 ("with no completed request", ", ".join(c.zero_completed) or "none"),
                 ("not in the plan (ignored)", ", ".join(c.unexpected_trials) or "none"),
                 ("plan.json matches the spec", "yes" if c.plan_matches_spec else "NO"),
                 ("run status (run.json)", c.run_status or "unknown")]
    sections.append(section("completeness", "Appendix: completeness",
                            tables=[table("Trials", ["item", "value"], comp_rows, "ll")], paragraphs=c.load_problems,
                            appendix=True))
    sections.append(section("setup", "Appendix: setup, provenance, resolved settings and pins", appendix=True,
                            paragraphs=[spec.description.strip()] if spec.description.strip() else [],
                            tables=_setup_tables(data, a)))
    methods = [(k, v if isinstance(v, str) else json.dumps(v, sort_keys=True)) for k, v in sorted(METHODS.items())]
    methods += [(f"metric: {k}", v) for k, v in sorted(METRIC_DOCS.items())]
    env = render_environment()
    repro = [("run id", a.run.run_id or "n/a"), ("spec sha256", a.run.spec_sha256 or "n/a"),
             ("dates (from raw data)", _dates(data)),
             ("analysis files", ", ".join(a.files)),
             ("figure render environment", ", ".join(f"{k} {env[k]}" for k in sorted(env))),
             ("CSV decimals", ", ".join(f"{k} {v}" for k, v in sorted(CSV_DECIMALS.items())))]
    sections.append(section("methods", "Appendix: methods and reproducibility", appendix=True,
                            tables=[table("Methods", ["item", "definition"], methods, "ll"),
                                    table("Reproducibility", ["item", "value"], repro, "ll")],
                            paragraphs=["Every table and figure is regenerated from the raw run directory by "
                                        "`evidence report RUN` (analysis/, figures/, report/); the same raw files and "
                                        "render environment give the same bytes."]))
    figures = {}
    for name in have:
        figures[name] = {"name": name, "title": FIGURE_TITLES.get(name, name.replace("_", " ")),
                         "md_path": f"{figures_rel}/{name}.png",
                         "png_b64": base64.b64encode(figs[f"{name}.png"]).decode("ascii")}
    return {
        "title": spec.title, "name": spec.name, "bottom_line": bottom_line(a),
        "bottom_line_more": bottom_line_more(a), "run_id": a.run.run_id or "(unknown run id)",
        "status": c.run_status or "unknown", "dates": _dates(data),
        "headline": dict(head, figure="throughput_vs_concurrency"),
        "sections": sections, "figures": figures,
        "caution": a.caution,
    }


def _profile_sections(run_dir: Path, profile: Any = ...) -> list[dict]:
    """The article's trace analyses per profiled point (evidence.traces.profile), diagnostic only."""
    from evidence.traces.profile import profile_of, profile_rows

    prof = profile_of(run_dir, profile)
    if prof is None:
        return []
    rows = profile_rows(prof)
    tabs = []
    summ = [[r["point"], r["file"], r.get("kernels"), fixed(r.get("kernel_active_fraction"), 2, 100, "%"),
             r.get("output_tokens_in_window"), r.get("steps"), r.get("steps_with_prefill"),
             r.get("prefill_steps_at_budget"), r.get("budget"), fixed(r.get("decode_population_mean"), 1),
             r.get("forwards"), r.get("forwards_rejected")] for r in rows["summary"] if not r.get("absent")]
    tabs.append(table("Per profiled point: kernel-active fraction (union over streams), scheduler steps, forwards",
                      ["point", "trace", "kernels", "kernel-active", "output tokens in window", "steps",
                       "steps with prefill", "prefill steps at budget", "budget", "mean decode population",
                       "forwards", "rejected segments"], summ, "llrrrrrrrrrr"))
    sus = [[r["point"], fixed(r.get("sustained_mixed_sequences"), 2), fixed(r.get("sustained_mixed_kernel_us"), 2),
            r.get("sustained_mixed_forwards"), fixed(r.get("sustained_decode_sequences"), 2),
            fixed(r.get("sustained_decode_kernel_us"), 2), r.get("sustained_decode_forwards")]
           for r in rows["summary"] if not r.get("absent")]
    tabs.append(table("Sustained regime (plateau of consecutive forwards): sequence population and mean attention "
                      "kernel duration", ["point", "mixed: sequences", "mixed: kernel µs", "mixed: forwards",
                                          "decode: sequences", "decode: kernel µs", "decode: forwards"], sus))
    fam = [[r["point"], r["family"], r["count"], fixed(r["total_ms"], 3), fixed(r["share"], 2, 100, "%"),
            fixed(r.get("per_token_us"), 3)] for r in rows["families"]]
    tabs.append(table("Kernel families per output token (tokens counted inside the trace window via the clock bridge)",
                      ["point", "family", "kernels", "total ms", "share", "µs per output token"], fam, "llrrrr"))
    geo, collapsed = geometry_rows(rows["geometry"])
    if geo:
        tabs.append(table("Launch geometry of attention kernels (graph-replayed and eager apart)",
                          ["point", "rule", "grid", "replay", "launches", "total ms", "µs per output token",
                           "what the grid means"], geo, "lllrrrrl",
                          "replay: 'graph' = launched by a CUDA graph replay, 'eager' = launched one by one. "
                          "µs per output token = total kernel time / output tokens counted inside the trace window."
                          + (f" {collapsed} groups whose grid has no declared meaning are collapsed into one row "
                             "per point and rule; every group is in analysis/profile.json and "
                             "profile_geometry.csv." if collapsed else "")))
    absent = [f"C{r['point']} {r['file']}: {r['absent']}" for r in rows["summary"] if r.get("absent")]
    absent += [f"C{r['point']} {r['file']}: {r['absent_reasons']}" for r in rows["summary"]
               if not r.get("absent") and r.get("absent_reasons")]
    return [section("profile", "Profiling (diagnostic)", paragraphs=[
        "Diagnostic only: a separate, shorter workload on a server started for profiling, never mixed with the "
        "measured trials above; profilers perturb execution, so these numbers localize where GPU time goes and do "
        "not reconstruct the throughput tables. Kernel families follow the ordered rules "
        + "; ".join(f"{r['name']}: /{r['pattern']}/" for r in prof["rules"]) + "."] + absent, tables=tabs)]


def _anchor_sections(run_dir: Path) -> list[dict]:
    from evidence.analysis.anchor import anchor_comparison

    anc = anchor_comparison(run_dir)
    if anc is None:
        return []
    rows = []
    for t in anc["trials"]:
        if t.get("absent"):
            rows.append([t["trial"], t.get("point"), "n/a", "n/a", "n/a", t["absent"]])
            continue
        m = t["metrics"]
        rows.append([t["trial"], t["point"]] + [
            f"{fixed(m[k]['ours'], 2)} / {fixed(m[k]['anchor'], 2)} ({fixed(m[k]['ratio'], 3)})"
            for k in ("output throughput (tok/s)", "mean TTFT (ms)", "mean TPOT (ms)")] + [""])
    return [section("anchor", "Our client against vLLM's own client", paragraphs=[anc["method"]], tables=[
        table("Per trial: ours / anchor (ratio)", ["trial", "point", "output tok/s", "mean TTFT ms", "mean TPOT ms", "note"],
              rows, "lrrrrl")])]


def _env(templates: Path):
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), undefined=jinja2.StrictUndefined,
                             autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2", "html"),
                                                                 default_for_string=False, default=False),
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["mdcell"] = lambda s: str(s).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    env.filters["slug"] = lambda s: re.sub(r"[^a-z0-9]+", "-", str(s).lower()).strip("-")
    env.globals["csp"] = CSP  # the page's Content-Security-Policy (report.html.j2's <meta>)
    return env


def render_report(run_dir: Path, out_dir: Path | None = None, *, data: RunData | None = None,
                  analysis: Analysis | dict | None = None, figures: dict[str, bytes] | None = None,
                  templates_dir: Path | None = None, figures_rel: str = "../figures",
                  profile: Any = ...) -> list[Path]:
    """Write report.md and a self-contained report.html to out_dir (default run_dir/report); return them.

    The markdown links figures at ../figures/ (where `evidence report` writes them, in a run as in a
    release); the HTML embeds them. profile: the run's trace analyses when the caller has them (None: no
    profile); by default they are computed here.
    """
    run_dir = Path(run_dir)
    data = data if data is not None else load_run(run_dir)
    res = analysis if analysis is not None else compute_analysis(data)
    figs = figures if figures is not None else figure_bytes(data, res)
    ctx = build_context(run_dir, data, res, figs, figures_rel=figures_rel, profile=profile)
    env = _env(find_templates(templates_dir))
    out = Path(out_dir) if out_dir is not None else run_dir / REPORT
    written = []
    for tname, fname in (("report.md.j2", "report.md"), ("report.html.j2", "report.html")):
        body = env.get_template(tname).render(**ctx)
        write_atomic(out / fname, body)
        written.append(out / fname)
    return written
