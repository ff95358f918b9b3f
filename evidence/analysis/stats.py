"""Paired comparisons with a stated procedure: the interval, p, the distribution-free companion, MDE, Holm.

The procedure (one for every comparison of two points, metrics or runs):

- The unit is a pair: a and b measured in the same round (repeat) on the same server. The
  comparison works on the log ratios d_i = ln(a_i / b_i) (Kalibera & Jones): a paired
  t-test of mean(d) = 0, two-sided, and the t-based 95% interval of mean(d), back-transformed
  to a relative difference as exp(.) - 1. Assumption: the log ratios are roughly normal and
  the pairs independent. Both are said in `Paired.test`.
- `effect` is the mean relative paired difference, mean((a_i - b_i) / b_i), a fraction. That
  is the number the issue's "+12.6%" is (the H200 A100-settings C128 vs C256 run: 12.59%);
  the interval and p are the log-ratio ones (that run: p = 0.105, [-5.86%, +34.21%]), whose
  own centre is `ratio_effect` = exp(mean d) - 1 (the geometric-mean ratio; 12.40% there).
  The two differ by a small amount of order sd^2/2; the verdict comes from the interval only.
- Verdicts: `finding` when the interval excludes 0 (p < alpha), `not significant` when it
  does not (the interval and the MDE say what could not have been seen), `no claim` with
  fewer than 2 pairs.
- Distribution-free companions: the exact two-sided sign test on the wins (ties dropped;
  scipy.stats.binomtest) and the exact sign-flip permutation p of mean(d)
  (scipy.stats.permutation_test; exact up to 2^16 sign vectors, seeded Monte Carlo beyond).
  With n pairs the smallest two-sided p either can reach is 2/2^n, so below 6 pairs no
  distribution-free claim at 95% is possible, and `sign_note` says so.
- MDE: t(0.975, n-1) * sd(d) / sqrt(n), back-transformed: the smallest relative effect whose
  interval would have excluded 0 at this noise (the interval's half-width).
- Sessions (engine restarts): given each pair's session, the within- and between-session
  variance of ln(a/b) are estimated (one-way random-effects ANOVA); when the sessions' means
  differ by more than their repeats explain, the session is the unit (the test runs over the
  session means; repeats inside one server cannot speak for the next server start).
- Several declared comparisons: `holm()` adjusts the p-values (Holm's step-down, which
  controls the family-wise error rate and is uniformly more powerful than Bonferroni) and
  reports each interval at the level of its Holm step (see `holm`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Sequence

import numpy as np
from scipy import stats

NO_DF_CLAIM_N = 6  # the smallest n whose exact two-sided sign/permutation p (2/2^n) is < 0.05
PERM_EXACT_MAX_N = 16  # up to 2^16 sign vectors: exact; beyond: seeded Monte Carlo of that many
PERM_SEED = 20261203


@dataclass(frozen=True)
class Paired:
    a: Any  # label (or point) of the first side
    b: Any
    metric: str
    n_pairs: int
    effect: float | None  # mean of (a_i - b_i) / b_i, a fraction; None when n_pairs == 0
    ci95: tuple[float, float] | None  # interval of the relative difference (fractions); see ci_level
    p_value: float | None  # paired t-test on ln(a/b), two-sided
    test: str  # the stated procedure and its assumption
    sign_p: float | None  # exact two-sided sign test (ties dropped)
    sign_note: str | None  # said when n < 6
    mde: float | None  # minimum detectable relative effect at this noise (fraction)
    wins_a: int  # pairs where a is better (by higher_is_better)
    wins_b: int
    verdict: str  # "finding" | "not significant" | "no claim"
    p_adjusted: float | None  # after Holm; == p_value when alone
    # -- added beyond the agreed fields --
    ratio_effect: float | None = None  # exp(mean ln(a/b)) - 1: the centre of the interval
    mean_log: float | None = None
    sd_log: float | None = None  # sample sd (ddof=1) of ln(a/b) over the units (pairs or session means)
    perm_p: float | None = None  # exact sign-flip permutation p of mean ln(a/b)
    ties: int = 0
    ci_level: float = 0.95  # the level `ci95` is at (higher after Holm adjustment)
    alpha: float = 0.05
    higher_is_better: bool = True
    better: Any = None  # a or b when the verdict is a finding, else None
    note: str | None = None
    unit: str = "repeat"  # "repeat" or "session": what the test's n counts
    n_units: int = 0  # the test's n (pairs, or sessions)
    components: dict | None = None  # within/between-session variance (variance_components) when sessions were given

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ci95"] = list(self.ci95) if self.ci95 is not None else None
        return d


def _test_text(n: int, alpha: float, unit: str = "repeat") -> str:
    over = f"{n} pairs" if unit == "repeat" else f"the mean ln(a/b) of {n} engine sessions"
    return (f"paired t-test on ln(a/b) over {over}, two-sided at alpha {alpha:g}; "
            f"{100 * (1 - alpha):g}% t interval of the mean log ratio, back-transformed as exp(.)-1; "
            "assumes the log ratios are roughly normal and the pairs independent")


def _no_df_note(n: int, unit: str = "repeat") -> str | None:
    if n >= NO_DF_CLAIM_N:
        return None
    return (f"n < {NO_DF_CLAIM_N}: no distribution-free claim is possible at 95% "
            f"(the smallest exact two-sided sign or permutation p with {n} {'pairs' if unit == 'repeat' else 'sessions'} is "
            f"{(2 / 2 ** n if n else 1.0):.4g})")


def _interval(mean: float, sd: float, n: int, level: float) -> tuple[float, float]:
    half = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return (math.expm1(mean - half), math.expm1(mean + half))


def _perm_p(d: np.ndarray) -> float:
    n = len(d)
    if n < 2 or not np.any(d):
        return 1.0  # one pair: both sign vectors are as extreme, p = 2/2
    res = stats.permutation_test(
        (d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
        alternative="two-sided", n_resamples=2 ** min(n, PERM_EXACT_MAX_N), vectorized=True,
        rng=np.random.default_rng(PERM_SEED))
    return float(min(1.0, res.pvalue))


def _check(values: Sequence[float], side: str, metric: str) -> np.ndarray:
    arr = np.asarray([float(v) for v in values], dtype=float)
    bad = [v for v in arr if not (math.isfinite(v) and v > 0)]
    if bad:
        raise ValueError(f"{metric}: the paired comparison works on ln(a/b), so every value must be a finite "
                         f"positive number; side {side} has {bad[:3]} (an unmeasured value must be left out "
                         "of both sides of its pair, not passed as zero)")
    return arr


def paired(a_values: Sequence[float], b_values: Sequence[float], *, a: Any, b: Any, metric: str,
           higher_is_better: bool = True, alpha: float = 0.05, sessions: Sequence[int] | None = None) -> Paired:
    """Compare a and b over pairs (a_values[i], b_values[i]) measured in the same round.

    `sessions` (the engine session of each pair, optional): when the pairs come from 2 or more
    sessions whose mean log ratios differ by more than the repeats inside them explain (the
    between-session variance estimate is above 0), the session is the unit: the test, the
    interval, the MDE and the distribution-free p run over the session means of ln(a/b)."""
    if len(a_values) != len(b_values):
        raise ValueError(f"{metric}: {len(a_values)} values for {a!r} but {len(b_values)} for {b!r}; "
                         "a paired comparison needs one value of each per round")
    if sessions is not None and len(sessions) != len(a_values):
        raise ValueError(f"{metric}: {len(sessions)} session labels for {len(a_values)} pairs")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, not {alpha}")
    av = _check(a_values, str(a), metric)
    bv = _check(b_values, str(b), metric)
    n = len(av)
    d = np.log(av / bv)
    a_better = (d > 0) if higher_is_better else (d < 0)
    b_better = (d < 0) if higher_is_better else (d > 0)
    wins_a, wins_b = int(a_better.sum()), int(b_better.sum())
    ties = n - wins_a - wins_b
    unit, u, comp, unit_note = "repeat", d, None, None
    labels = sorted(set(sessions)) if sessions is not None else []
    if len(labels) >= 2:
        if n > len(labels):
            comp = variance_components(d, list(sessions))
            if comp["sd_between"] > 0:
                unit = "session"
                u = np.array(comp["session_means"])
                unit_note = (f"the session is the unit: {len(labels)} engine sessions whose mean log ratios differ "
                             f"(between-session sd {comp['sd_between']:.4g}, within {comp['sd_within']:.4g}, "
                             f"F-test p {comp['f_p']:.3g})")
            else:
                unit_note = (f"{len(labels)} engine sessions whose means do not differ beyond the repeats' noise "
                             f"(between-session sd estimate 0): the repeat is the unit")
        else:
            unit = "session"  # one repeat per session: the repeats are the sessions
    m = len(u)
    base = dict(a=a, b=b, metric=metric, n_pairs=n, test=_test_text(m, alpha, unit), wins_a=wins_a, wins_b=wins_b,
                ties=ties, alpha=alpha, higher_is_better=higher_is_better, sign_note=_no_df_note(m, unit),
                unit=unit, n_units=m, components=comp)
    if n == 0:
        return Paired(effect=None, ci95=None, p_value=None, sign_p=None, mde=None, verdict="no claim",
                      p_adjusted=None, note="no pairs", **base)
    effect = float(np.mean((av - bv) / bv))
    mean = float(np.mean(u))
    ua = int(((u > 0) if higher_is_better else (u < 0)).sum())
    ub = int(((u < 0) if higher_is_better else (u > 0)).sum())
    sign_p = float(stats.binomtest(ua, ua + ub, 0.5).pvalue) if ua + ub else 1.0
    common = dict(effect=effect, ratio_effect=math.expm1(mean), mean_log=mean, sign_p=sign_p,
                  perm_p=_perm_p(u), **base)
    if m < 2:
        return Paired(ci95=None, p_value=None, mde=None, verdict="no claim", p_adjusted=None,
                      note=f"fewer than 2 {unit}s: no interval", **common)
    sd = float(np.std(u, ddof=1))
    notes = [unit_note] if unit_note else []
    if sd == 0.0:
        # Every unit gave the same ratio: the t statistic is undefined; its limit is used.
        p = 1.0 if mean == 0.0 else 0.0
        notes.append(f"every {unit} gave the same ratio: zero spread, the interval is a point")
    else:
        p = float(stats.ttest_1samp(u, 0.0).pvalue)
    ci = _interval(mean, sd, m, 1 - alpha)
    mde = math.expm1(stats.t.ppf(1 - alpha / 2, m - 1) * sd / math.sqrt(m))
    finding = p < alpha
    return Paired(ci95=ci, p_value=p, mde=mde, verdict="finding" if finding else "not significant",
                  p_adjusted=p, sd_log=sd, ci_level=1 - alpha, note="; ".join(notes) or None,
                  better=(_better(mean, a, b, higher_is_better) if finding else None), **common)


def _better(mean: float, a: Any, b: Any, higher: bool) -> Any:
    return a if (mean > 0) == higher else b


def holm_adjust(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values: sort ascending, p_adj(j) = max_{k<=j} min(1, (m-k+1) p_(k))."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adj = np.empty(m)
    running = 0.0
    for rank, idx in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[idx]))
        adj[idx] = running
    return [float(x) for x in adj]


def holm(results: list[Paired]) -> list[Paired]:
    """Holm-adjust a family of declared comparisons (those with a p-value; `no claim` ones are left out).

    Verdict: `finding` only when the Holm-adjusted p < alpha. Interval: each comparison's interval
    is reported at the level of its Holm step, so that it agrees with the decision: the j-th
    smallest p among the r rejected ones gets the 1 - alpha/(m-j+1) interval (which excludes 0),
    every comparison not rejected gets the 1 - alpha/(m-r) interval of the step where Holm stopped
    (which contains 0). The level is in `ci_level`; with one comparison nothing changes. These are
    step-level intervals, not simultaneous ones (Bonferroni's 1 - alpha/m intervals would be).
    """
    fam = [i for i, r in enumerate(results) if r.p_value is not None]
    out = list(results)
    m = len(fam)
    if m == 0:
        return out
    alphas = {results[i].alpha for i in fam}
    if len(alphas) != 1:
        raise ValueError(f"a Holm family needs one alpha, got {sorted(alphas)}")
    alpha = alphas.pop()
    adj = holm_adjust([results[i].p_value for i in fam])
    order = sorted(range(m), key=lambda k: (results[fam[k]].p_value, k))
    rejected = [k for k in order if adj[k] < alpha]
    r = len(rejected)
    for rank, k in enumerate(order):
        res = results[fam[k]]
        finding = adj[k] < alpha
        level = 1 - alpha / (m - rank) if finding else 1 - alpha / (m - r)
        if m == 1:
            level = 1 - alpha
        ci = res.ci95
        if res.sd_log is not None and res.sd_log > 0:
            ci = _interval(res.mean_log, res.sd_log, res.n_units or res.n_pairs, level)
        note = res.note
        if m > 1:
            note = ((note + "; ") if note else "") + (
                f"Holm over {m} comparisons: adjusted p {adj[k]:.4g}, interval at {100 * level:.4g}%")
        out[fam[k]] = replace(res, p_adjusted=adj[k], ci95=ci, ci_level=level, note=note,
                              verdict="finding" if finding else "not significant",
                              better=_better(res.mean_log, res.a, res.b, res.higher_is_better) if finding else None)
    return out


def _t_power(n: int, delta: float, sd: float, alpha: float) -> float:
    df = n - 1
    tc = stats.t.ppf(1 - alpha / 2, df)
    nc = delta * math.sqrt(n) / sd
    return float(stats.nct.sf(tc, df, nc) + stats.nct.cdf(-tc, df, nc))


MAX_REPEATS = 100_000


def _validate(sd_log: float, effect: float) -> float:
    if not (math.isfinite(sd_log) and sd_log >= 0):
        raise ValueError(f"the sd of the log ratios must be a finite number >= 0, not {sd_log}")
    if not (math.isfinite(effect) and effect > -1 and effect != 0):
        raise ValueError(f"the effect must be a relative difference above -100% and not 0, not {effect}")
    return abs(math.log1p(effect))


def repeats_needed(sd_log: float, effect: float, *, alpha: float = 0.05, power: float = 0.8) -> int:
    """Pairs needed for `power` to find a true relative `effect` (e.g. 0.05) with the paired t-test
    on ln(a/b) at two-sided `alpha`, given the sd of the log ratios (noncentral t, exact)."""
    delta = _validate(sd_log, effect)
    if not 0 < power < 1:
        raise ValueError(f"power must be between 0 and 1, not {power}")
    if sd_log == 0:
        return 2
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    n = max(2, int((z * sd_log / delta) ** 2))
    while _t_power(n, delta, sd_log, alpha) < power:
        n += 1
        if n > MAX_REPEATS:
            raise ValueError(f"more than {MAX_REPEATS} repeats would be needed; the effect is too small for this noise")
    return n


def repeats_for_halfwidth(sd_log: float, halfwidth: float, *, alpha: float = 0.05) -> int:
    """Pairs needed for the interval's half-width on the log scale, t(1-alpha/2, n-1) sd / sqrt(n),
    to be at most ln(1 + halfwidth) (e.g. halfwidth 0.05: an interval of about +-5%)."""
    h = _validate(sd_log, halfwidth)
    n = 2
    while stats.t.ppf(1 - alpha / 2, n - 1) * sd_log / math.sqrt(n) > h:
        n += 1
        if n > MAX_REPEATS:
            raise ValueError(f"more than {MAX_REPEATS} repeats would be needed for a +-{halfwidth:.2%} interval")
    return n


def variance_components(d: Sequence[float], sessions: Sequence[int]) -> dict[str, Any]:
    """Within- and between-session variance of log ratios (one-way random-effects ANOVA, method of
    moments; the between component is floored at 0). Needs at least 2 sessions and some session with
    2 or more repeats."""
    x = np.asarray(d, dtype=float)
    labels = sorted(set(sessions))
    groups = [x[np.asarray(sessions) == s] for s in labels]
    n, k = len(x), len(groups)
    if k < 2 or n <= k:
        raise ValueError(f"variance components need 2 or more sessions and more repeats than sessions "
                         f"(have {k} session(s), {n} repeat(s))")
    grand = x.mean()
    msw = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / (n - k)
    msb = sum(len(g) * float((g.mean() - grand) ** 2) for g in groups) / (k - 1)
    n0 = (n - sum(len(g) ** 2 for g in groups) / n) / (k - 1)
    p = float(stats.f.sf(msb / msw, k - 1, n - k)) if msw > 0 else (0.0 if msb > 0 else 1.0)
    return {"sessions": k, "repeats": n, "sd_within": math.sqrt(msw), "sd_between": math.sqrt(max(0.0, (msb - msw) / n0)),
            "f_p": p, "session_means": [float(g.mean()) for g in groups]}


def plan_noise(d: Sequence[float], sessions: Sequence[int] | None, *, effect: float, alpha: float = 0.05,
               power: float = 0.8) -> dict[str, Any]:
    """How many repeats (and sessions) observed log-ratio noise needs for a +-effect interval and for
    `power` to find a true `effect`. With several sessions whose means differ (a between-session sd
    estimate above 0; the F-test p is reported beside it), the session is the unit: its sd is sqrt(sd_b^2 + sd_w^2 / r) for r
    repeats per session, and the counts are sessions; otherwise the repeat is the unit."""
    x = [float(v) for v in d]
    if len(x) < 2:
        raise ValueError(f"the run has {len(x)} pair(s) for this comparison; noise needs at least 2")
    sess = list(sessions) if sessions is not None else [1] * len(x)
    n = len(x)
    sd_all = float(np.std(x, ddof=1))
    # chi-square interval of the sd: with few pairs the counts below are rough, and this says how rough
    sd_ci = [sd_all * math.sqrt((n - 1) / stats.chi2.ppf(0.975, n - 1)),
             sd_all * math.sqrt((n - 1) / stats.chi2.ppf(0.025, n - 1))]
    out: dict[str, Any] = {"n_pairs": n, "sd_log": sd_all, "sd_log_ci95": sd_ci, "effect": effect,
                           "alpha": alpha, "power": power}
    rough = (f"; the sd comes from {n} pairs (95% interval {sd_ci[0]:.3g}-{sd_ci[1]:.3g}), so the counts are rough: "
             "plan again from a run with more repeats") if n < 10 else ""
    k = len(set(sess))
    if k < 2:
        sd = out["sd_log"]
        out.update(unit="repeat", repeats_halfwidth=repeats_for_halfwidth(sd, effect, alpha=alpha),
                   repeats_power=repeats_needed(sd, effect, alpha=alpha, power=power), sessions=None,
                   note="one engine session: the variance between server starts is not measured (repeats inside one "
                        "server cannot estimate it); run with sweep.sessions >= 3 and plan again from that run" + rough)
        return out
    vc = variance_components(x, sess)
    out["components"] = vc
    r = max(1, round(len(x) / k))
    if vc["sd_between"] == 0:
        sd = vc["sd_within"]
        out.update(unit="repeat", repeats_halfwidth=repeats_for_halfwidth(sd, effect, alpha=alpha),
                   repeats_power=repeats_needed(sd, effect, alpha=alpha, power=power), sessions=k,
                   note=f"{k} sessions whose means do not differ beyond the repeats' noise: the repeat is the unit" + rough)
        return out
    sd_unit = math.sqrt(vc["sd_between"] ** 2 + vc["sd_within"] ** 2 / r)
    sh = repeats_for_halfwidth(sd_unit, effect, alpha=alpha)
    sp = repeats_needed(sd_unit, effect, alpha=alpha, power=power)
    out.update(unit="session", repeats_per_session=r, sd_session=sd_unit, sessions_halfwidth=sh, sessions_power=sp,
               repeats_halfwidth=sh * r, repeats_power=sp * r,
               note=(f"the sessions differ (between-session sd {vc['sd_between']:.4f} vs within {vc['sd_within']:.4f}): "
                     f"the session is the unit; with {r} repeat(s) per session" + rough))
    return out


def run_log_ratios(trials: Sequence[dict], values: dict[str, float], a: Any, b: Any) -> tuple[list[float], list[int]]:
    """ln(a/b) per repeat where both trials have a value, and each repeat's session (plan.json trials,
    trial id -> value)."""
    by: dict[int, dict[Any, float]] = {}
    sess: dict[int, int] = {}
    for t in trials:
        v = values.get(t["id"])
        if v is not None and v > 0 and t["point"] in (a, b):
            by.setdefault(t["repeat"], {})[t["point"]] = float(v)
            sess[t["repeat"]] = int(t.get("session") or 1)
    reps = sorted(r for r, pv in by.items() if a in pv and b in pv)
    return [math.log(by[r][a] / by[r][b]) for r in reps], [sess[r] for r in reps]
