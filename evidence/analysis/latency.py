"""Latency against concurrency with intervals: each point's latency statistic and its 95% interval across repeats.

The per-repeat statistic (a trial's p50, p99, mean... of a latency metric, computed within the trial as in
`latency.mean_over_repeats`) is the observation. Latency is positive and right-skewed, so the interval is worked
out on logs, as the throughput comparisons are: the two-sided 95% t interval (scipy.stats.t, n - 1 degrees of
freedom) of the mean of ln(statistic) over the units, back-transformed by exp. It is therefore an interval around
its centre, exp(mean of the units' ln) (stored as `geometric_mean`), asymmetric and always above 0. That centre
is the geometric mean of the repeats when the repeat is the unit (or the sessions hold equal numbers of repeats);
with the session as the unit and uneven sessions it is exp(mean of the sessions' mean logs), which weighs each
session alike, not the geometric mean of all repeats. `value` stays the arithmetic mean over the repeats that the
tables show; it is not the interval's centre (it exceeds the geometric mean by about sd^2/2 in relative terms).

The unit follows `evidence.analysis.stats` and is fixed by the design, the same for every statistic of a point:
when the point's trials come from two or more server starts (engine sessions) the start is the unit, valued by the
mean of ln over its repeats (repeats inside one server start cannot speak for the next); with one start, the repeat,
and the interval's `scope` is "this server start". The within- and between-start sd (`components`) are shown, never
used to choose. With fewer than 2 units there is no interval: `ci_low` and
`ci_high` are null and `absent` says why, never a zero-width interval. A statistic <= 0 (not a latency) has no
logarithm: no interval, and `absent` says so. A value that is not finite (NaN, inf) comes first: no interval, and
`value` is null too (a mean over it would be NaN or inf, no number). `absent_short` is the reason in a few words,
for a table cell or a legend. A zero spread over 2 or more units is a point interval and says so.

Assumption (stated in each entry's `procedure`): the logs of the per-unit statistics are roughly normal and
independent.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy import stats as sps

from evidence.analysis.model_rows import Interval
from evidence.analysis.stats import scope_of, session_means, variance_components
from evidence.analysis.tables import latency_stats
from evidence.metrics import pct_key

LEVEL = 0.95

METHOD = ("per point, latency metric and statistic (mean, median, percentiles): the statistic computed within each "
          "trial; the two-sided 95% t interval (scipy.stats.t, n - 1 df) of the mean of ln(statistic) over the units, "
          "back-transformed by exp, so the interval is around exp(mean ln over the units) (geometric_mean: the "
          "repeats' geometric mean, or with uneven engine sessions as the unit exp of the mean of the sessions' mean "
          "logs), asymmetric and positive; 'value' is the arithmetic mean over repeats (the tables' number), not the "
          "interval's centre. "
          "The unit is fixed by the design, one for every statistic of a point: when the point's trials span 2 or more "
          "server starts (engine sessions) the start, valued by the mean of ln over its repeats (df = starts - 1); "
          "with one start the repeat, and the scope is that server start. Fewer than 2 units, or a statistic <= 0: no interval "
          "(absent, with the reason); a statistic that is not finite: no interval and no value. Assumes roughly normal, independent logs of the per-unit statistics. "
          "Stored as points[].latency[metric].intervals[stat]")


def interval(values: Sequence[float], sessions: Sequence[int] | None = None, *, what: str = "statistic",
             level: float = LEVEL) -> dict[str, Any]:
    """The mean of per-repeat `values` and the back-transformed t interval of their mean log, with the unit fixed
    by the design as in the paired test (2+ sessions: the session; else the repeat).

    Returns {value, geometric_mean, ci_low, ci_high, n, unit, level, procedure} (+ `absent` and `absent_short` when
    there is no interval, + `components` (log scale) when sessions were given, + `note`). `geometric_mean` is
    exp(mean ln over the units): with uneven sessions as the unit, exp of the mean of the sessions' mean logs."""
    x = np.asarray([float(v) for v in values], dtype=float)
    if sessions is not None and len(sessions) != len(x):
        raise ValueError(f"{what}: {len(sessions)} session labels for {len(x)} values")
    sess = [int(s) for s in sessions] if sessions is not None else [1] * len(x)
    labels = sorted(set(sess))
    finite = bool(np.isfinite(x).all())  # NaN <= 0 is False: a NaN would pass as positive, so it is checked first
    positive = finite and bool(len(x)) and bool((x > 0).all())
    unit, comp, note = "repeat", None, None
    lu = np.log(x) if positive else x  # the units' ln values (unused when not all positive)
    if len(labels) >= 2:  # fixed by the design, not by the data: several server starts make the start the unit
        unit = "session"
        if positive:
            if len(x) > len(labels):
                comp = variance_components(lu, sess)
            lu = session_means(lu, sess)
        else:
            lu = np.asarray(sorted(set(sess)), dtype=float)  # only the count matters when there is no interval
    n = len(lu)
    units = "repeats" if unit == "repeat" else "engine sessions (each valued by the mean of ln over its repeats)"
    # exp(mean of the units' ln): with uneven sessions as the unit, not the geometric mean of all repeats
    centre = ("the geometric mean" if unit == "repeat" else
              "exp of the mean of the sessions' mean logs (the repeats' geometric mean when the sessions are even)")
    out: dict[str, Any] = {
        "value": float(np.mean(x)) if len(x) and finite else None, "geometric_mean": None, "ci_low": None, "ci_high": None,
        "n": n, "unit": unit, "df": n - 1 if n >= 2 else None, "scope": scope_of(unit, n), "level": level,
        "procedure": (f"{100 * level:g}% t interval (n - 1 df) of the mean of ln(per-trial {what}) over {n} {units}, "
                      f"back-transformed by exp: an interval around {centre}, asymmetric and positive "
                      "('value' is the arithmetic mean over repeats, not its centre); assumes roughly normal, "
                      "independent logs"),
    }
    if comp is not None:
        out["components"] = {"scale": "ln", **{k: comp[k] for k in ("sessions", "repeats", "sd_within", "sd_between",
                                                                      "sd_within_ci", "sd_between_ci", "f_p")}}
    if not finite:
        bad = float(x[~np.isfinite(x)][0])
        out["absent"] = (f"a per-trial {what} is not finite ({bad:g}): no interval, and no mean over repeats "
                         "(value is null)")
        out["absent_short"] = "a trial's value is not finite"
    elif len(x) and not positive:
        bad = float(x[x <= 0][0])
        out["absent"] = (f"a per-trial {what} of {bad:g} (<= 0) has no logarithm: no log-scale interval "
                         "(a latency should be positive)")
        out["absent_short"] = f"a trial's value is {bad:g}"
    elif n < 2:
        out["absent"] = (f"{'no' if n == 0 else 'one'} measured {unit}: an interval needs at least 2 "
                         f"{'repeats' if unit == 'repeat' else 'sessions'}")
        out["absent_short"] = f"n = {n}"
    else:
        m, sd = float(np.mean(lu)), float(np.std(lu, ddof=1))
        out["geometric_mean"] = math.exp(m)
        if sd == 0.0:
            lo = hi = m
            note = ((note + "; ") if note else "") + f"every {unit} gave the same value: zero spread, the interval is a point"
        else:
            lo, hi = sps.t.interval(level, n - 1, loc=m, scale=sd / math.sqrt(n))
        out["ci_low"], out["ci_high"] = math.exp(lo), math.exp(hi)
    if note:
        out["note"] = note
    return out


def absent_short(iv: Interval | dict) -> str | None:
    """The reason an interval is absent, in a few words (None when it is present). An analysis.json from before
    `absent_short` had two reasons: fewer than 2 units, else a per-trial value <= 0."""
    iv = iv if isinstance(iv, Interval) else Interval.from_dict(iv)
    if iv.ci_low is not None and not iv.absent:
        return None
    if iv.absent_short:
        return str(iv.absent_short)
    return f"n = {iv.n}" if iv.n < 2 else "a trial's value is <= 0"


def shown_keys(percentiles: Sequence[float]) -> list[str]:
    """The two percentiles a latency-vs-concurrency view shows: p50 and p99, or the spec's lowest and highest."""
    pcts = [float(p) for p in percentiles]
    if not pcts:
        return []
    return [pct_key(p) for p in ([50.0, 99.0] if 50 in pcts and 99 in pcts else sorted({min(pcts), max(pcts)}))]


def point_intervals(point: dict, rows: dict[str, dict], percentiles: Sequence[float]) -> dict[str, dict]:
    """metric -> stat -> interval for one point row (analysis.json's points[i]), from its trials' rows."""
    trials = [rows[t] for t in point["trials"] if t in rows and rows[t].get("status") == "present"]
    out: dict[str, dict] = {}
    for m in sorted(point["latency"]):
        per = [t for t in trials if (t.get("latency") or {}).get(m)]
        if not per:
            continue
        out[m] = {}
        for st in latency_stats(percentiles):
            have = [t for t in per if isinstance(t["latency"][m].get(st), (int, float))]
            out[m][st] = interval([t["latency"][m][st] for t in have], [int(t.get("session") or 1) for t in have],
                                  what=f"{m.upper()} {st}")
    return out


def attach_intervals(points: list[dict], rows: dict[str, dict], percentiles: Sequence[float]) -> None:
    """Add latency[m]["intervals"] (stat -> interval) to each point row in place (analysis.json's
    points[i]; its methods["latency_intervals"] is METHOD).

    A metric no trial of the point measured gets no intervals key (its mean_over_repeats is null and the point's
    `absent` already says why)."""
    for p in points:
        for m, by_stat in point_intervals(p, rows, percentiles).items():
            p["latency"][m]["intervals"] = by_stat


__all__ = ["LEVEL", "METHOD", "interval", "absent_short", "shown_keys", "point_intervals", "attach_intervals"]
