"""`evidence run SPEC --until-decided --max-repeats N`: add balanced blocks until every comparison is decided.

After the planned repeats, and after every block added, the run takes a *look*: for each
declared comparison (analysis.comparisons: a vs b) the pairs so far (output tok/s of a and
of b in the same repeat) go to the sequential procedure `look(pairs, look_index, max_looks,
alpha, comparisons)` (evidence.analysis.sequential: group-sequential, O'Brien-Fleming-type
alpha spending over at most max_looks = N - planned + 1 looks, alpha split over the
comparisons; handed in by the CLI, as the runner does not import the analysis stage).
A comparison that crossed keeps its decision; when every comparison is decided the run
stops, otherwise one more block (one repeat of every point, in the next rotation of the
cyclic Latin square; a new engine session when the spec has sessions > 1) is run, until
the budget of N repeats is spent (the last look decides what is left).

The unit of the looks is the analysis's (evidence.analysis.stats): with sweep.sessions > 1 every
added block is a server start of its own and the looks test the starts (each valued by its mean
ln(a/b)); with one start they test the pairs, and every decision is about that server start.

Every look and the stopping rule are recorded: looks.jsonl (one line per look, with the alpha
spent, the boundaries and, for each comparison, its unit, n and scope; then one with "stop"
and the rule), the same as events ("look", "until_decided_stop"), and plan.json, rewritten
atomically with the added trials after the planned ones and an "until_decided" note. The number
of looks is fixed at the first look: resuming with another --max-repeats is refused.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Callable

from evidence.canon import read_json, write_json
from evidence.records import dumps_line
from evidence.run.session import RunError
from evidence.run.sweep import RunContext, run_trials, trial_session
from evidence.rundir import SUMMARY, RunDir
from evidence.spec.model import Spec
from evidence.spec.plan import Trial, arm_of_session, point_seed, repeat_orders

ALPHA = 0.05
METRIC = "output_throughput"

Look = Callable[..., Any]


def check_request(spec: Spec, max_repeats: int | None) -> None:
    """Refuse, before anything is created, an --until-decided run that could not work."""
    if not spec.analysis.comparisons:
        raise RunError("--until-decided needs the comparisons to decide: declare them in the spec under "
                       "analysis.comparisons (e.g. [{a: 64, b: 128}]).")
    arms = [a.name for a in getattr(spec, "arms", [])]
    if arms:
        if max_repeats is not None and (max_repeats - spec.sweep.repeats) % len(arms):
            raise RunError(f"--max-repeats {max_repeats}: with {len(arms)} arms every added block is {len(arms)} "
                           f"server starts of one repeat each, so the repeats beyond the planned "
                           f"{spec.sweep.repeats} must be a multiple of {len(arms)}.")
    elif not spec.analysis.comparisons:
        raise RunError("--until-decided needs the comparisons to decide: declare them in the spec under "
                       "analysis.comparisons (e.g. [{a: 64, b: 128}]).")
    if max_repeats is None:
        raise RunError("--until-decided needs a budget: --max-repeats N (the most repeats of every point).")
    if max_repeats < spec.sweep.repeats:
        raise RunError(f"--max-repeats {max_repeats} is below the spec's planned repeats ({spec.sweep.repeats}); "
                       "the budget counts the planned repeats too.")


def _looks(rd: RunDir) -> list[dict]:
    if not rd.looks.is_file():
        return []
    return [json.loads(ln) for ln in rd.looks.read_text(encoding="utf-8").splitlines() if ln.strip()]


def stopped(rd: RunDir) -> bool:
    """Whether the stopping rule has already ended this run's looks."""
    return any("stop" in ln for ln in _looks(rd))


def _append_look(rd: RunDir, row: dict) -> None:
    with open(rd.looks, "a", encoding="utf-8") as f:
        f.write(dumps_line(row))


def pairs(rd: RunDir, trials: list[Trial], a: int, b: int) -> tuple[list[tuple[float, float]], list[int]]:
    """(a, b) output tok/s from the same repeat, for every repeat where both trials are complete, and
    each pair's engine session (with sessions, the looks' unit is the session, as in the analysis)."""
    done = set(rd.completed_trials())
    val: dict[tuple[int, int], float] = {}
    sess: dict[int, int] = {}
    for t in trials:
        if t.id in done and t.point in (a, b):
            v = read_json(rd.trial_dir(t.id) / SUMMARY).get(METRIC)
            if v is not None:
                val[(t.repeat, t.point)] = float(v)
                sess[t.repeat] = trial_session(t)
    reps = [r for r in sorted({r for r, _ in val}) if (r, a) in val and (r, b) in val]
    return [(val[(r, a)], val[(r, b)]) for r in reps], [sess[r] for r in reps]


def arm_pairs(rd: RunDir, trials: list[Trial], a: str, b: str, point: int, m: int) -> list[tuple[float, float]]:
    """Per block of server starts (one start per arm) where both arms measured `point`: each arm's geometric
    mean output tok/s over its start's repeats there (the block is the unit, as in evidence.analysis.arms)."""
    done = set(rd.completed_trials())
    logs: dict[tuple[int, str], list[float]] = {}
    for t in trials:
        if t.id in done and t.point == point and t.arm in (a, b):
            v = read_json(rd.trial_dir(t.id) / SUMMARY).get(METRIC)
            if isinstance(v, (int, float)) and v > 0:
                logs.setdefault(((trial_session(t) - 1) // m, t.arm), []).append(math.log(v))
    blocks = sorted({blk for blk, _ in logs})
    return [(math.exp(sum(logs[(blk, a)]) / len(logs[(blk, a)])), math.exp(sum(logs[(blk, b)]) / len(logs[(blk, b)])))
            for blk in blocks if (blk, a) in logs and (blk, b) in logs]


def _targets(spec: Spec) -> list[tuple[Any, Any, int | None]]:
    """What the looks decide: the declared comparisons of points (a, b, None), or, with arms, every pair of arms
    at every point (arm a, arm b, point)."""
    arms = [x.name for x in getattr(spec, "arms", [])]
    if arms:
        return [(a, b, p) for i, a in enumerate(arms) for b in arms[i + 1:] for p in spec.sweep.points]
    return [(c.a, c.b, None) for c in spec.analysis.comparisons]


def _json_safe(v: Any) -> Any:
    """Strict JSON: a non-finite number (a t statistic of zero spread) is written as its name."""
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else ("-inf" if v < 0 else "nan")
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def _as_dict(d: Any) -> dict:
    if hasattr(d, "as_dict"):
        d = d.as_dict()
    elif dataclasses.is_dataclass(d):
        d = dataclasses.asdict(d)
    return _json_safe(dict(d))


def next_block(spec: Spec, trials: list[Trial]) -> list[Trial]:
    """One more repeat of every point, in the next rotation of the cyclic Latin square (with arms: one more block,
    a server start of one repeat per arm, the arms in the next block's rotation)."""
    sw = spec.sweep
    arms = [a.name for a in getattr(spec, "arms", [])]
    if arms:
        out: list[Trial] = []
        for j in range(len(arms)):
            r = max(t.repeat for t in trials + out) + 1
            s = max(trial_session(t) for t in trials + out) + 1
            order = repeat_orders(list(sw.points), r, "balanced", None)[r - 1]
            start = len(trials) + len(out)
            out += [Trial(index=start + i, repeat=r, point=p, position=i + 1, prompts=sw.prompts_at(p),
                          seed=point_seed(spec.workload.seed, p), session=s, arm=arm_of_session(s, arms))
                    for i, p in enumerate(order)]
        return out
    r = max(t.repeat for t in trials) + 1
    order = repeat_orders(list(sw.points), r, "balanced", None)[r - 1]
    # with sessions, each added block is a session of its own (a fresh server); without, none is named
    session = max(trial_session(t) for t in trials) + 1 if sw.sessions > 1 else None
    start = len(trials)
    return [Trial(index=start + i, repeat=r, point=p, position=i + 1, prompts=sw.prompts_at(p),
                  seed=point_seed(spec.workload.seed, p), session=session) for i, p in enumerate(order)]


def _extend_plan(rd: RunDir, trials: list[Trial], block: list[Trial], note: dict) -> None:
    plan = read_json(rd.plan_json)
    plan["trials"] = [t.as_dict() for t in trials + block]
    if "sessions" in plan:
        plan["sessions"] = max(trial_session(t) for t in trials + block)
    plan["until_decided"] = note
    write_json(rd.plan_json, plan)


def _name(r: dict) -> str:
    return (f"C{r['a']} vs C{r['b']}" if r.get("point") is None else f"arm {r['a']} vs arm {r['b']} at C{r['point']}")


def run_until_decided(ctx: RunContext, trials: list[Trial], *, plan_repeats: int, max_repeats: int, look: Look,
                      progress: bool) -> list[Trial]:
    """Look, and add blocks until every comparison is decided or the budget is spent; returns all trials."""
    spec, rd = ctx.spec, ctx.rd
    targets = _targets(spec)
    m = max(1, len(getattr(spec, "arms", [])))  # repeats a block adds: one, or one start per arm
    max_looks = (max_repeats - plan_repeats) // m + 1
    recorded = [ln for ln in _looks(rd) if "stop" not in ln]
    if recorded and recorded[0].get("max_looks") != max_looks:
        # the boundaries depend on the number of looks: changing it after a look would spend alpha twice
        raise RunError(f"this run's sequential design was fixed at its first look: at most {recorded[0].get('max_looks')} "
                       f"looks (--max-repeats {recorded[0].get('max_repeats', '?')}); --max-repeats {max_repeats} would "
                       f"make it {max_looks}. Resume with --max-repeats {recorded[0].get('max_repeats', '?')}, or start "
                       "a new run.")
    by_start = int(getattr(spec.sweep, "sessions", 1) or 1) > 1
    seen = {ln["look"] for ln in recorded}
    # a comparison that crossed keeps its decision (the procedure is not asked again)
    kept: dict[tuple[Any, Any, int | None], dict] = {}
    for ln in recorded:
        for r in ln["comparisons"]:
            if r.get("decided") and (r["a"], r["b"], r.get("point")) not in kept:
                kept[(r["a"], r["b"], r.get("point"))] = r
    rule = ""
    while not stopped(rd):
        repeats = max(t.repeat for t in trials)
        k = (repeats - plan_repeats) // m + 1
        results = []
        for a, b, point in targets:
            key = (a, b, point)
            if key in kept:
                results.append({**kept[key], "from_look": kept[key].get("from_look", k - 1)})
                continue
            if point is None:
                pr, sessions = pairs(rd, trials, a, b)
                kw: dict[str, Any] = {"sessions": sessions} if by_start else {}
            else:  # arms: the block of starts is the unit; the planned blocks make the first look
                pr, sessions = arm_pairs(rd, trials, a, b, point, m), None
                kw = {"unit": "block"}
            d = _as_dict(look(pr, look_index=k, max_looks=max_looks, alpha=ALPHA, comparisons=len(targets), **kw))
            rule = d.get("rule") or rule
            rec = d.get("look") or {}
            r = {"a": a, "b": b, **({"point": point} if point is not None else {}), "metric": METRIC,
                 "n_pairs": len(pr), "unit": rec.get("unit", "repeat"), "n_units": rec.get("n_units", len(pr)),
                 "scope": rec.get("scope"), "pair_sessions": sessions, "from_look": k, **d}
            results.append(r)
            if r.get("decided"):
                kept[key] = r
        all_decided = all(bool(r.get("decided")) for r in results)
        row = {"look": k, "max_looks": max_looks, "max_repeats": max_repeats, "planned_repeats": plan_repeats,
               "repeats": repeats, "alpha": ALPHA, "comparisons": results, "all_decided": all_decided}
        if k not in seen:  # a resumed run recomputes the same look from the same trials: record it once
            _append_look(rd, row)
            rd.event("look", look=k, max_looks=max_looks, repeats=repeats, all_decided=all_decided,
                     verdicts={_name(r): r.get("verdict") for r in results})
            seen.add(k)
            ctx.say(f"look {k} of at most {max_looks} after {repeats} repeat(s): "
                    + "; ".join(f"{_name(r)}: {r.get('verdict')}" for r in results), highlight=False)
        if all_decided or repeats >= max_repeats:
            # at the budget's last look every comparison is decided by definition ("not significant" if it
            # never crossed): the stop is the budget's, not the evidence's
            futile = [r for r in results if (r.get("look") or {}).get("stop_reason") == "futility"]
            why = (f"budget spent ({max_repeats} repeats)" if repeats >= max_repeats else
                   "every comparison decided" + (f" ({len(futile)} for futility)" if futile else ""))
            stop = {"stop": why, "look": k, "repeats": repeats, "max_repeats": max_repeats,
                    "planned_repeats": plan_repeats, "rule": rule}
            _append_look(rd, stop)
            rd.event("until_decided_stop", **stop)
            ctx.say(f"until-decided: stopped after {repeats} repeat(s): {why}", highlight=False)
            break
        block = next_block(spec, trials)
        _extend_plan(rd, trials, block, {"planned_repeats": plan_repeats, "max_repeats": max_repeats,
                                         "rule": rule})
        rd.event("plan_extended", repeat=block[0].repeat, trials=[t.id for t in block], look=k)
        trials = trials + block
        run_trials(ctx, len(trials), block, progress=progress)
    return trials
