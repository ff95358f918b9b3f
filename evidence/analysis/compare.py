"""Two runs of the same experiment side by side (e.g. canonical vs clean-room).

`compare_runs(a, b)` takes two run directories, or two release folders whose
raw run is under data/raw/<run-id>/ (exactly one), and reports, from the raw
files only (through `evidence.analysis`, computed in memory):

- per point: both mean output throughputs and the shift (b - a) / a, CVs, repeats;
- whether the ordering of points is the same (statement from means, the statement
  supported by paired verdicts, and the rank order by throughput);
- each run's paired advantages and verdicts for every comparison either spec names;
- what differs: the spec (excluding `name`), the engine's resolved settings, the
  provenance (engine, accelerator, packages, python, git, host), and the pins.

No absolute path is written: runs are named by their run id.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from evidence.analysis.analyze import build_analysis
from evidence.analysis.findings import paired_comparison
from evidence.analysis.load import NotARunDir, load_run
from evidence.analysis.model import Analysis, Comparison, RepeatValue
from evidence.analysis.numbers import interval_text, label, pct_text
from evidence.analysis.stats import CLAIM_MIN_STARTS, session_means
from evidence.rundir import SPEC_RESOLVED

SHIFT_TEST = ("the run as a fixed effect and its server starts nested in it: when both runs have 2 or more server "
              "starts at the point, Welch's t (Welch-Satterthwaite df) on the starts' mean ln(output throughput), each "
              "start valued by the mean of ln over its repeats; otherwise Welch's t on the repeats' ln(throughput), "
              "whose scope is the two runs' server starts, not the configurations (a shift between two single starts "
              "cannot be told from the difference between any two starts); two-sided at alpha 0.05; 95% interval of "
              "the difference of mean logs, back-transformed as exp(.) - 1")
PROVENANCE_KEYS = ("engine", "accelerator", "packages", "python", "git", "host", "model", "os", "cpu", "container")
SPEC_EXCLUDED = ("name",)
MAX_DIFFS_PER_KEY = 200


def resolve_run_dir(path: Path) -> tuple[Path, str]:
    """(run directory, kind 'run' | 'release') for a run dir or a release folder with exactly one raw run."""
    p = Path(path)
    if (p / SPEC_RESOLVED).is_file():
        return p, "run"
    raw = p / "data" / "raw"
    if raw.is_dir():
        runs = sorted(d for d in raw.iterdir() if d.is_dir() and (d / SPEC_RESOLVED).is_file())
        if len(runs) == 1:
            return runs[0], "release"
        if not runs:
            raise NotARunDir(f"{p} looks like a release but data/raw/ holds no run directory (no "
                             "data/raw/<run-id>/spec.resolved.json). Give a run directory or a release with one raw run.")
        raise NotARunDir(f"{p} is a release whose data/raw/ holds {len(runs)} runs ("
                         + ", ".join(d.name for d in runs) + "); give one of them directly, e.g. "
                         f"{p / 'data' / 'raw' / runs[0].name}.")
    if not p.exists():
        raise NotARunDir(f"{p} does not exist. Give a run directory (runs/<run-id>/) or a release folder "
                         "(releases/<tag>/, whose run is under data/raw/).")
    raise NotARunDir(f"{p} is neither a run directory (no spec.resolved.json) nor a release folder (no data/raw/). "
                     "Give a folder under runs/ that `evidence run` created, or a release made by `evidence freeze`.")


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys; lists of objects with a 'name' (or 'pin') become keyed by it."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        if not obj and prefix:
            out[prefix] = {}
        for k in sorted(obj, key=str):
            out.update(_flatten(obj[k], f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj) and _list_key(obj):
        kf = _list_key(obj)
        for x in obj:
            key = str(x.get(kf))
            rest = {k: v for k, v in x.items() if k != kf}
            if set(rest) == {"version"}:
                out[f"{prefix}.{key}"] = rest["version"]
            else:
                out.update(_flatten(rest, f"{prefix}[{kf}={key}]"))
    else:
        out[prefix] = obj
    return out


def _list_key(items: list[dict]) -> str | None:
    """The field that names each item of a list uniquely (pin, index, name), if any."""
    for k in ("pin", "index", "name", "id"):
        vals = [x.get(k) for x in items]
        if all(v is not None for v in vals) and len(set(map(str, vals))) == len(vals):
            return k
    return None


def diff_dicts(a: Any, b: Any, limit: int = MAX_DIFFS_PER_KEY) -> list[dict]:
    """[{path, a, b}] for every leaf that differs (a missing leaf is None), sorted by path."""
    fa, fb = _flatten(a), _flatten(b)
    out = []
    for k in sorted(set(fa) | set(fb)):
        va, vb = fa.get(k), fb.get(k)
        if va != vb:
            out.append({"path": k, "a": va, "b": vb, "only_in": "a" if k not in fb else "b" if k not in fa else None})
    return out[:limit]


def _engine_diff(ra: dict | None, rb: dict | None) -> list[dict]:
    ra, rb = ra or {}, rb or {}
    out = []
    for k in sorted(set(ra) | set(rb)):
        va, vb = ra.get(k), rb.get(k)
        val_a = va.get("value") if isinstance(va, dict) and "value" in va else va
        val_b = vb.get("value") if isinstance(vb, dict) and "value" in vb else vb
        if val_a != val_b or k not in ra or k not in rb:
            out.append({"name": k, "a": val_a, "b": val_b,
                        "source_a": va.get("source") if isinstance(va, dict) else None,
                        "source_b": vb.get("source") if isinstance(vb, dict) else None})
    return out


def _rank(res: Analysis) -> list[int] | None:
    ms = [(p.output_throughput.mean, p.point) for p in res.points]
    if any(m is None for m, _ in ms):
        return None
    return [p for _, p in sorted(ms, key=lambda x: (-x[0], x[1]))]


def _side(res: Analysis, kind: str) -> dict:
    r, c = res.run, res.completeness
    return {"run_id": r.run_id or "(unknown)", "kind": kind, "spec_name": r.spec_name or res.spec.name,
            "spec_sha256": r.spec_sha256, "status": r.status,
            "trials_present": c.trials_present, "trials_planned": c.trials_planned,
            "missing": c.missing, "with_failures": c.with_failures}


def shift_test(xa: list[float], xb: list[float], sa: list[int] | None = None, sb: list[int] | None = None) -> dict:
    """Run b against run a at one point: the runs are a fixed effect and their server starts (sessions `sa`,
    `sb`, one label per value) are nested in them. A run with 2 or more starts gives its starts as units (each the
    mean ln over its repeats, never its repeats: they are not independent); a run of one start gives its repeats,
    and the scope says the claim is about these starts. Welch's
    t on the units' logs (unequal variances), its 95% interval back-transformed as exp(.) - 1. Fewer than 2
    units on either side: no claim."""
    sa = list(sa) if sa is not None else [1] * len(xa)
    sb = list(sb) if sb is not None else [1] * len(xb)
    ka = [(x, s) for x, s in zip(xa, sa) if x and x > 0]
    kb = [(x, s) for x, s in zip(xb, sb) if x and x > 0]
    starts_a, starts_b = len({s for _, s in ka}), len({s for _, s in kb})
    # each run's unit is fixed by its design (did it restart the server?), never by the data
    unit = "session" if starts_a >= 2 and starts_b >= 2 else "repeat" if max(starts_a, starts_b) < 2 else "mixed"

    def units(kx: list[tuple[float, int]], starts: int) -> Any:
        logs = [math.log(x) for x, _ in kx]
        return session_means(logs, [s for _, s in kx]) if starts >= 2 else np.asarray(logs)

    la, lb = units(ka, starts_a), units(kb, starts_b)
    if unit == "session":
        scope = f"these {starts_a} + {starts_b} server starts"
        note = (None if min(starts_a, starts_b) >= CLAIM_MIN_STARTS else
                f"a claim about the configurations needs at least {CLAIM_MIN_STARTS} server starts in each run")
    else:
        scope = f"these {starts_a} + {starts_b} server starts"
        note = ("a run with one server start: the shift is between these server starts, and the variance between "
                "starts is not in the test; a claim about the configurations needs at least "
                f"{CLAIM_MIN_STARTS} server starts in each run (sweep.sessions)")
    out: dict[str, Any] = {"shift_ci95": None, "shift_p": None, "shift_test": SHIFT_TEST, "shift_unit": unit,
                           "shift_n": [len(la), len(lb)], "shift_df": None, "shift_scope": scope,
                           "shift_scope_note": note}
    if len(la) < 2 or len(lb) < 2:
        return {**out, "shift_verdict": "no claim"}
    if np.ptp(la) == 0 and np.ptp(lb) == 0:
        same = bool(la[0] == lb[0])
        return {**out, "shift_ci95": [math.expm1(lb[0] - la[0])] * 2, "shift_p": 1.0 if same else 0.0,
                "shift_verdict": "not significant" if same else "finding"}
    with warnings.catch_warnings():  # near-identical repeats: scipy warns about precision, the numbers stand
        warnings.simplefilter("ignore", RuntimeWarning)
        t = stats.ttest_ind(lb, la, equal_var=False)
        lo, hi = t.confidence_interval(0.95)
    p = float(t.pvalue)
    return {**out, "shift_ci95": [math.expm1(float(lo)), math.expm1(float(hi))], "shift_p": p,
            "shift_df": float(t.df), "shift_verdict": "finding" if p < 0.05 else "not significant"}


def _sessions_of(res: Analysis, point: int, values: list[RepeatValue]) -> list[int]:
    """The server start of each per-repeat value of a point (1 where the trial does not say)."""
    out = []
    for v in values:
        t = res.trial_at(v.repeat, point)
        out.append(int((t.session if t else None) or 1))
    return out


def compare_runs(a: Path, b: Path) -> dict:
    """Compare two runs (or releases) of the same experiment; see the module doc."""
    pa, ka = resolve_run_dir(Path(a))
    pb, kb = resolve_run_dir(Path(b))
    da, db = load_run(pa), load_run(pb)
    ra, rb = build_analysis(da), build_analysis(db)
    sa = json.loads(da.spec.model_dump_json())
    sb = json.loads(db.spec.model_dump_json())
    for k in SPEC_EXCLUDED:
        sa.pop(k, None)
        sb.pop(k, None)
    spec_diff = diff_dicts(sa, sb)
    caveats: list[str] = []
    pts_a = {p.point: p for p in ra.points}
    pts_b = {p.point: p for p in rb.points}
    common = sorted(set(pts_a) & set(pts_b))
    if set(pts_a) != set(pts_b):
        caveats.append(f"The runs sweep different points ({sorted(pts_a)} vs {sorted(pts_b)}); only the common points "
                       f"{common} are compared.")
    if spec_diff:
        caveats.append("The specs differ (beyond the name): " + ", ".join(d["path"] for d in spec_diff[:12])
                       + (" ..." if len(spec_diff) > 12 else "") + "; the runs are not the same experiment in those respects.")
    points = []
    for P in common:
        xa, xb = pts_a[P], pts_b[P]
        ta, tb = xa.output_throughput, xb.output_throughput
        ma, mb = ta.mean, tb.mean
        shift = (mb - ma) / ma if (ma is not None and mb is not None and ma != 0) else None
        flags = [f"a: {f}" for f in xa.flags] + [f"b: {f}" for f in xb.flags]
        points.append({"point": P, "label": label(P), "a_mean": ma, "b_mean": mb, "shift": shift,
                       **shift_test([v.value for v in ta.values], [v.value for v in tb.values],
                                    _sessions_of(ra, P, ta.values), _sessions_of(rb, P, tb.values)),
                       "a_cv": ta.cv, "b_cv": tb.cv, "cv_kind_a": ta.std_kind, "cv_kind_b": tb.std_kind,
                       "a_repeats": f"{xa.repeats_measured}/{xa.repeats_planned}",
                       "b_repeats": f"{xb.repeats_measured}/{xb.repeats_planned}", "flags": flags})
    oa, ob = ra.ordering, rb.ordering
    rank_a, rank_b = _rank(ra), _rank(rb)
    ordering = {
        "a": oa.statement, "b": ob.statement,
        "same": oa.statement is not None and oa.statement == ob.statement,
        "a_supported": oa.supported_statement, "b_supported": ob.supported_statement,
        "same_supported": oa.supported_statement is not None and oa.supported_statement == ob.supported_statement,
        "a_held_in_repeats": f"{oa.held_in_repeats}/{oa.repeats_planned}",
        "b_held_in_repeats": f"{ob.held_in_repeats}/{ob.repeats_planned}",
        "rank_a": rank_a, "rank_b": rank_b,
        "same_rank": rank_a is not None and rank_a == rank_b,
    }
    if set(pts_a) != set(pts_b):
        ordering["same"] = False
    comps = []
    names = []
    for res in (ra, rb):
        for c in res.comparisons:
            if (c.a, c.b) not in names:
                names.append((c.a, c.b))
    for A, B in names:
        row: dict[str, Any] = {"a": A, "b": B, "name": f"{label(A)} vs {label(B)}"}
        for side, res in (("run_a", ra), ("run_b", rb)):
            c = res.comparison(A, B)
            if c is None:  # named only by the other spec: computed the same way
                try:
                    c = Comparison.from_dict(paired_comparison(res.to_dict(), A, B))
                except KeyError:
                    c = None
            row[side] = None if c is None else {
                "mean_diff": c.mean_diff, "wins_a": c.wins_a, "wins_b": c.wins_b, "pairs": c.pairs,
                "repeats_planned": c.repeats_planned, "unit": c.unit, "n_pairs": c.n_pairs, "effect": c.effect,
                "ci95": c.ci95, "p_value": c.p_value, "p_adjusted": c.p_adjusted, "mde": c.mde, "test": c.test,
                "n_units": c.n_units, "df": c.df, "scope": c.scope, "scope_note": c.scope_note,
                "better": c.better, "verdict": c.verdict, "statement": c.statement}
        xa_, xb_ = row["run_a"] or {}, row["run_b"] or {}
        row["both_findings_agree"] = (xa_.get("verdict") == xb_.get("verdict") == "finding"
                                      and xa_.get("better") == xb_.get("better"))
        comps.append(row)
    prov_a, prov_b = da.provenance or {}, db.provenance or {}
    prov_diff = {}
    for k in PROVENANCE_KEYS:
        if k in prov_a or k in prov_b:
            d = diff_dicts(prov_a.get(k), prov_b.get(k))
            if d:
                prov_diff[k] = d
    pins_a = {str(p.get("pin")): p for p in (prov_a.get("pins") or []) if isinstance(p, dict)}
    pins_b = {str(p.get("pin")): p for p in (prov_b.get("pins") or []) if isinstance(p, dict)}
    pins = [{"pin": k, "a_effective": (pins_a.get(k) or {}).get("effective"), "b_effective": (pins_b.get(k) or {}).get("effective"),
             "a_ok": (pins_a.get(k) or {}).get("ok"), "b_ok": (pins_b.get(k) or {}).get("ok")}
            for k in sorted(set(pins_a) | set(pins_b))]
    for side, res in (("a", ra), ("b", rb)):
        done = res.completeness
        if done.missing or done.with_failures:
            caveats.append(f"Run {side} ({res.run.run_id}): missing {done.missing or 'none'}, "
                           f"failed requests in {done.with_failures or 'none'}.")
    return {
        "schema": "evidence.compare/1",
        "a": _side(ra, ka), "b": _side(rb, kb),
        "same_spec_except_name": not spec_diff,
        "spec_diff": spec_diff,
        "engine_resolved_diff": _engine_diff(ra.setup.engine_resolved, rb.setup.engine_resolved),
        "provenance_diff": prov_diff,
        "pins": pins,
        "points": points,
        "ordering": ordering,
        "comparisons": comps,
        "caveats": caveats,
        "methods": {"shift": "(mean_b - mean_a) / mean_a of output throughput per point; its interval and verdict: "
                             + SHIFT_TEST,
                    "ordering": "statements from each run's analysis (means; and with '~' where the paired verdict is "
                                "not a finding); rank = points sorted by mean throughput, highest first",
                    "paired": "each run's own paired comparison, as in its analysis (evidence.analysis.stats: paired t "
                              "on ln(a/b), Holm over its declared comparisons); both_findings_agree when both runs "
                              "find the same point better"},
    }


def summary_lines(c: dict) -> list[str]:
    """A few plain sentences for the terminal."""
    out = [f"a: {c['a']['run_id']} ({c['a']['kind']}, {c['a']['status']}); b: {c['b']['run_id']} ({c['b']['kind']}, "
           f"{c['b']['status']})"]
    o = c["ordering"]
    out.append(f"ordering: a {o['a']} | b {o['b']} -> {'same' if o['same'] else 'DIFFERENT'}")
    for p in c["points"]:
        ci = p["shift_ci95"]
        out.append(f"{p['label']} shift b vs a: {pct_text(p['shift'], 1, signed=True)} ("
                   + (f"95% CI {interval_text(ci)}, "
                      f"p {p['shift_p']:.3g}; " if ci else "") + f"{p['shift_verdict']}, Welch on logs over "
                   f"{ {'session': 'server starts', 'mixed': 'server starts / repeats of one start'}.get(p.get('shift_unit'), 'repeats')} "
                   f"{'/'.join(map(str, p.get('shift_n') or []))}"
                   + (f", {p['shift_df']:.3g} df" if p.get("shift_df") is not None else "")
                   + f"; scope: {p.get('shift_scope')})")
    for comp in c["comparisons"]:
        xa, xb = comp["run_a"], comp["run_b"]
        fa = xa["statement"] if xa else "n/a"
        fb = xb["statement"] if xb else "n/a"
        out.append(f"{comp['name']}: run a {fa} | run b {fb}")
    return out
