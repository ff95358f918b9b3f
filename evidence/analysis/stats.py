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
- MDE: the smallest relative effect the test would find with 80% power at the level it is judged at
  (the Holm step's level in a family): (t(1 - a'/2, df) + t(0.80, df)) * se, back-transformed.
  The interval's half-width (`halfwidth`) is only found about half the time.
- The unit is fixed by the design, never by the data: with pairs from 2 or more server starts
  (engine sessions) the start is the unit (the test runs over the session means of ln(a/b), df =
  starts - 1: the REML / Satterthwaite answer of the model ln(a/b) = mu + start + residual for a
  balanced design, and an unweighted-means test otherwise); with one start the repeat is the unit
  and the verdict's scope is "this server start". The within- and between-start sd of ln(a/b) are
  reported beside it (`variance_components`), never used to choose the unit.
- Scope: every verdict says what it is about (`scope`): "this server start", "these N server starts"
  (or "these N hosts"); a claim about the configuration needs at least 3 starts (`scope_note` says
  why a verdict with fewer is not one).
- Equivalence: with a declared margin m, two one-sided t tests on the same units against
  +-ln(1 + m) at the level used; both rejected: verdict `equivalent` (within +-m).
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


CLAIM_MIN_STARTS = 3  # a claim about the configuration (not these starts) needs this many server starts
POWER = 0.8  # the power the MDE is stated at


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
    mde: float | None  # smallest relative effect found with 80% power at the level used (fraction)
    wins_a: int  # pairs where a is better (by higher_is_better)
    wins_b: int
    verdict: str  # "finding" | "equivalent" | "not significant" | "no claim"
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
    unit: str = "repeat"  # "repeat", "session" (a server start) or "host": what the test's n counts
    n_units: int = 0  # the test's n (pairs, or sessions)
    components: dict | None = None  # within/between-session variance (variance_components) when sessions were given
    df: int | None = None  # the t test's degrees of freedom (n_units - 1)
    scope: str = ""  # what the verdict is about: "this server start", "these N server starts", "these N hosts"
    scope_note: str | None = None  # why the verdict is not a claim about the configuration (fewer than 3 starts)
    halfwidth: float | None = None  # the interval's half-width on the log scale, back-transformed (not the MDE)
    margin: float | None = None  # declared equivalence margin (fraction), None when not declared
    tost_p: float | None = None  # two one-sided tests against +-ln(1 + margin), the larger p
    equivalent: bool | None = None  # both one-sided tests rejected at the level used

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ci95"] = list(self.ci95) if self.ci95 is not None else None
        return d


def scope_of(unit: str, n: int, starts: int | None = None) -> str:
    """What a verdict over `n` units of `unit` is about."""
    if unit == "host":
        return f"these {n} hosts"
    if unit == "block":
        return f"these {n} blocks of server starts"
    k = n if unit == "session" else (starts or 1)
    return "this server start" if k <= 1 else f"these {k} server starts"


def scope_note_of(unit: str, n: int, starts: int | None = None) -> str | None:
    """Why a verdict is not (yet) a claim about the configuration, or None when it has 3+ starts or hosts."""
    if unit == "host":
        return None if n >= CLAIM_MIN_STARTS else (
            f"{n} hosts: a claim about hosts in general needs at least {CLAIM_MIN_STARTS}")
    if unit == "block":
        return None if n >= CLAIM_MIN_STARTS else (
            f"{n} blocks: a claim about the arms needs at least {CLAIM_MIN_STARTS} blocks of server starts")
    k = n if unit == "session" else (starts or 1)
    if k <= 1:
        return ("about this server start only: repeats inside one server cannot measure the variance between "
                f"server starts; a claim about the configuration needs at least {CLAIM_MIN_STARTS} server starts "
                "(sweep.sessions)")
    if k < CLAIM_MIN_STARTS:
        return (f"about these {k} server starts: their variance rests on {k - 1} df; a claim about the configuration "
                f"needs at least {CLAIM_MIN_STARTS} server starts (sweep.sessions)")
    return None


def _test_text(n: int, alpha: float, unit: str = "repeat") -> str:
    over = {"repeat": f"{n} pairs of one server start",
            "session": f"the mean ln(a/b) of {n} server starts (engine sessions)",
            "host": f"the mean ln(a/b) of {n} hosts",
            "block": f"{n} blocks of server starts (one start per arm, each valued by its mean ln)"}[unit]
    return (f"paired t-test on ln(a/b) over {over} ({max(n - 1, 0)} df), two-sided at alpha {alpha:g}; "
            f"{100 * (1 - alpha):g}% t interval of the mean log ratio, back-transformed as exp(.)-1; "
            "assumes the log ratios are roughly normal and the units independent")


def _no_df_note(n: int, unit: str = "repeat") -> str | None:
    if n >= NO_DF_CLAIM_N:
        return None
    word = {"repeat": "pairs", "session": "sessions", "host": "hosts", "block": "blocks"}[unit]
    return (f"n < {NO_DF_CLAIM_N}: no distribution-free claim is possible at 95% "
            f"(the smallest exact two-sided sign or permutation p with {n} {word} is "
            f"{(2 / 2 ** n if n else 1.0):.4g})")


def _interval(mean: float, sd: float, n: int, level: float) -> tuple[float, float]:
    half = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return (math.expm1(mean - half), math.expm1(mean + half))


def mde_of(sd: float, n: int, level: float, power: float = POWER) -> float:
    """Smallest relative effect found with `power` by the two-sided t test at `level` over n units of sd `sd`:
    (t(1 - a/2, n - 1) + t(power, n - 1)) * sd / sqrt(n), back-transformed."""
    df = n - 1
    return math.expm1((stats.t.ppf(0.5 + level / 2, df) + stats.t.ppf(power, df)) * sd / math.sqrt(n))


def tost(mean: float, sd: float, n: int, margin: float, alpha: float) -> float:
    """Two one-sided t tests of |mean ln ratio| < ln(1 + margin): the larger of the two one-sided p."""
    bound = math.log1p(margin)
    if sd == 0:
        return 0.0 if abs(mean) < bound else 1.0
    se = sd / math.sqrt(n)
    return float(max(stats.t.sf((mean + bound) / se, n - 1), stats.t.cdf((mean - bound) / se, n - 1)))


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


def session_means(x: Sequence[float], sessions: Sequence[int]) -> np.ndarray:
    """The unweighted mean of x within each session, in ascending session order."""
    arr, lab = np.asarray(x, dtype=float), np.asarray(sessions)
    return np.array([float(arr[lab == s].mean()) for s in sorted(set(sessions))])


def _judge(mean: float, sd: float, m: int, level: float, margin: float | None) -> dict[str, Any]:
    """Interval, half-width, MDE and equivalence of n = m units at `level` (p is computed by the caller)."""
    half = stats.t.ppf(0.5 + level / 2, m - 1) * sd / math.sqrt(m)
    out: dict[str, Any] = {"ci95": (math.expm1(mean - half), math.expm1(mean + half)), "ci_level": level,
                           "halfwidth": math.expm1(half), "mde": mde_of(sd, m, level)}
    if margin is not None:
        out["tost_p"] = tost(mean, sd, m, margin, 1 - level)
        out["equivalent"] = out["tost_p"] < 1 - level
    return out


def paired(a_values: Sequence[float], b_values: Sequence[float], *, a: Any, b: Any, metric: str,
           higher_is_better: bool = True, alpha: float = 0.05, sessions: Sequence[int] | None = None,
           unit: str | None = None, margin: float | None = None) -> Paired:
    """Compare a and b over pairs (a_values[i], b_values[i]) measured in the same round.

    `sessions` (the server start of each pair): with 2 or more starts the start is the unit (the test runs
    over the session means of ln(a/b)), whatever the data say; with one (or None) the repeat is the unit and
    the scope is that start. `unit="host"`: each pair is already one host's value (the hosts are the unit).
    `margin` (a fraction): also test equivalence within +-margin (TOST)."""
    if len(a_values) != len(b_values):
        raise ValueError(f"{metric}: {len(a_values)} values for {a!r} but {len(b_values)} for {b!r}; "
                         "a paired comparison needs one value of each per round")
    if sessions is not None and len(sessions) != len(a_values):
        raise ValueError(f"{metric}: {len(sessions)} session labels for {len(a_values)} pairs")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, not {alpha}")
    if margin is not None and not (math.isfinite(margin) and 0 < margin < 1):
        raise ValueError(f"{metric}: an equivalence margin is a fraction between 0 and 1 (0.05 for +-5%), not {margin}")
    av = _check(a_values, str(a), metric)
    bv = _check(b_values, str(b), metric)
    n = len(av)
    d = np.log(av / bv)
    a_better = (d > 0) if higher_is_better else (d < 0)
    b_better = (d < 0) if higher_is_better else (d > 0)
    wins_a, wins_b = int(a_better.sum()), int(b_better.sum())
    ties = n - wins_a - wins_b
    labels = sorted(set(sessions)) if sessions is not None else []
    u, comp = d, None
    if unit in ("host", "block"):
        pass
    elif len(labels) >= 2:  # fixed by the design: several server starts make the start the unit
        unit = "session"
        u = session_means(d, list(sessions))
        comp = variance_components(d, list(sessions)) if n > len(labels) else None  # descriptive only
    else:
        unit = "repeat"
    m = len(u)
    starts = len(labels) if labels else 1
    base = dict(a=a, b=b, metric=metric, n_pairs=n, test=_test_text(m, alpha, unit), wins_a=wins_a, wins_b=wins_b,
                ties=ties, alpha=alpha, higher_is_better=higher_is_better, sign_note=_no_df_note(m, unit),
                unit=unit, n_units=m, components=comp, df=(m - 1 if m >= 2 else None),
                scope=scope_of(unit, m, starts), scope_note=scope_note_of(unit, m, starts), margin=margin)
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
        word = {"repeat": "pairs", "session": "server starts", "host": "hosts", "block": "blocks"}[unit]
        return Paired(ci95=None, p_value=None, mde=None, verdict="no claim", p_adjusted=None,
                      note=f"fewer than 2 {word}: no interval", **common)
    sd = float(np.std(u, ddof=1))
    notes = []
    if sd == 0.0:
        # Every unit gave the same ratio: the t statistic is undefined; its limit is used.
        p = 1.0 if mean == 0.0 else 0.0
        notes.append(f"every {unit} gave the same ratio: zero spread, the interval is a point")
    else:
        p = float(stats.ttest_1samp(u, 0.0).pvalue)
    j = _judge(mean, sd, m, 1 - alpha, margin)
    finding = p < alpha
    verdict = "finding" if finding else ("equivalent" if j.get("equivalent") else "not significant")
    return Paired(p_value=p, verdict=verdict, p_adjusted=p, sd_log=sd, note="; ".join(notes) or None,
                  better=(_better(mean, a, b, higher_is_better) if finding else None), **j, **common)


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
    The MDE (80% power) and the equivalence test are at the same level.
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
        upd: dict[str, Any] = {}
        if res.sd_log is not None and res.n_units >= 2:
            upd = _judge(res.mean_log, res.sd_log, res.n_units, level, res.margin)
            if res.sd_log == 0:
                upd["ci95"] = res.ci95
        note = res.note
        if m > 1:
            note = ((note + "; ") if note else "") + (
                f"Holm over {m} comparisons: adjusted p {adj[k]:.4g}, interval at {100 * level:.4g}%")
        equivalent = upd.get("equivalent", res.equivalent)
        verdict = "finding" if finding else ("equivalent" if equivalent else "not significant")
        out[fam[k]] = replace(res, **{**upd, "p_adjusted": adj[k], "ci_level": level, "note": note,
                                      "verdict": verdict,
                                      "better": _better(res.mean_log, res.a, res.b, res.higher_is_better)
                                      if finding else None})
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


def variance_components(d: Sequence[float], sessions: Sequence[int], level: float = 0.95) -> dict[str, Any]:
    """Within- and between-session variance of logs (one-way random-effects model; ANOVA estimators, which
    are REML's for a balanced design, the between component floored at 0), with `level` intervals of both
    sd: the within sd by its chi-square interval (n - k df), the between sd by Graybill and Wang's modified
    large-sample interval (Burdick & Graybill 1992). Needs at least 2 sessions and more values than
    sessions."""
    x = np.asarray(d, dtype=float)
    labels = sorted(set(sessions))
    groups = [x[np.asarray(sessions) == s] for s in labels]
    n, k = len(x), len(groups)
    if k < 2 or n <= k:
        raise ValueError(f"variance components need 2 or more sessions and more repeats than sessions "
                         f"(have {k} session(s), {n} repeat(s))")
    grand = x.mean()
    ssw = sum(float(((g - g.mean()) ** 2).sum()) for g in groups)
    msw = ssw / (n - k)
    msb = sum(len(g) * float((g.mean() - grand) ** 2) for g in groups) / (k - 1)
    n0 = (n - sum(len(g) ** 2 for g in groups) / n) / (k - 1)
    p = float(stats.f.sf(msb / msw, k - 1, n - k)) if msw > 0 else (0.0 if msb > 0 else 1.0)
    a2 = (1 - level) / 2
    dfb, dfw = k - 1, n - k
    sdw_ci = [math.sqrt(ssw / stats.chi2.ppf(1 - a2, dfw)), math.sqrt(ssw / stats.chi2.ppf(a2, dfw))]
    g1 = 1 - dfb / stats.chi2.ppf(1 - a2, dfb)
    h1 = dfb / stats.chi2.ppf(a2, dfb) - 1
    g2 = 1 - dfw / stats.chi2.ppf(1 - a2, dfw)
    h2 = dfw / stats.chi2.ppf(a2, dfw) - 1
    f1, f2 = stats.f.ppf(1 - a2, dfb, dfw), stats.f.ppf(a2, dfb, dfw)
    g12 = ((f1 - 1) ** 2 - g1 ** 2 * f1 ** 2 - h2 ** 2) / f1
    h12 = ((1 - f2) ** 2 - h1 ** 2 * f2 ** 2 - g2 ** 2) / f2
    est = msb - msw
    lo = (est - math.sqrt(max(0.0, g1 ** 2 * msb ** 2 + h2 ** 2 * msw ** 2 + g12 * msb * msw))) / n0
    hi = (est + math.sqrt(max(0.0, h1 ** 2 * msb ** 2 + g2 ** 2 * msw ** 2 + h12 * msb * msw))) / n0
    sdb = math.sqrt(max(0.0, est / n0))
    return {"sessions": k, "repeats": n, "sd_within": math.sqrt(msw), "sd_between": sdb,
            "sd_within_ci": sdw_ci, "sd_between_ci": [math.sqrt(max(0.0, lo)), math.sqrt(max(0.0, hi))],
            "share_between": (sdb ** 2 / (sdb ** 2 + msw)) if sdb ** 2 + msw > 0 else None,
            "df_between": dfb, "df_within": dfw, "level": level,
            "f_p": p, "session_means": [float(g.mean()) for g in groups]}


def components_of(x: Sequence[float], sessions: Sequence[int], level: float = 0.95) -> dict[str, Any]:
    """variance_components for any design, with what cannot be estimated null and `absent` saying why
    (one server start: no between-start sd; one repeat per start: the two are not separable)."""
    arr = [float(v) for v in x]
    k, n = len(set(sessions)), len(arr)
    if k >= 2 and n > k:
        full = variance_components(arr, sessions, level)
        full.pop("session_means")
        return full
    out: dict[str, Any] = {"sessions": k, "repeats": n, "sd_within": None, "sd_between": None, "sd_within_ci": None,
                           "sd_between_ci": None, "share_between": None, "df_between": max(k - 1, 0),
                           "df_within": max(n - k, 0), "level": level, "f_p": None}
    if k <= 1:
        if n >= 2:
            sd = float(np.std(arr, ddof=1))
            ss = sd ** 2 * (n - 1)
            a2 = (1 - level) / 2
            out["sd_within"] = sd
            out["sd_within_ci"] = [math.sqrt(ss / stats.chi2.ppf(1 - a2, n - 1)),
                                   math.sqrt(ss / stats.chi2.ppf(a2, n - 1))]
        out["absent"] = ("one server start: the sd between starts is not measured (repeats inside one server "
                         "cannot estimate it)")
    else:
        out["absent"] = ("one repeat per server start: the between- and within-start sd are not separable "
                         "(the sd of the starts' values holds both)")
    return out


def plan_noise(d: Sequence[float], sessions: Sequence[int] | None, *, effect: float, alpha: float = 0.05,
               power: float = 0.8, costs: dict | None = None) -> dict[str, Any]:
    """How many repeats (and sessions) observed log-ratio noise needs for a +-effect interval and for
    `power` to find a true `effect`. With several sessions whose means differ (a between-session sd
    estimate above 0 or not: the unit is fixed by the design) the session is the unit: its sd is
    sqrt(sd_b^2 + sd_w^2 / r) for r repeats per session, and the counts are sessions; with one session the
    repeat is the unit and the plan is about that server start only."""
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
    cs, cr = (costs or {}).get("start_s"), (costs or {}).get("repeat_s")
    if len(x) <= k:  # one pair per start: the starts' sd holds both components, at 1 repeat per start
        r, sd_unit = 1, sd_all
        vc = {"sd_between": float("nan"), "sd_within": float("nan")}
        # the components are not separable, so the design stays at 1 repeat per start; its starts at the estimate
        # and at the upper end of that sd's 95% interval (the real uncertainty of a few starts)
        out["design"] = design_for(sd_all, 0.0, effect, cost_start=cs, cost_repeat=cr, alpha=alpha, power=power)
        out["design_upper"] = design_for(sd_ci[1], 0.0, effect, cost_start=cs, cost_repeat=cr, alpha=alpha,
                                         power=power)
        out["costs"] = costs
    else:
        vc = variance_components(x, sess)
        out["components"] = vc
        r = max(1, round(len(x) / k))
        sd_unit = math.sqrt(vc["sd_between"] ** 2 + vc["sd_within"] ** 2 / r)
        # the design that reaches the power at the least time, at the estimate and at the upper end of the
        # between-start sd's 95% interval (with few starts that sd is rough, and this says how rough)
        out["design"] = design_for(vc["sd_between"], vc["sd_within"], effect, cost_start=cs, cost_repeat=cr,
                                   alpha=alpha, power=power)
        out["design_upper"] = design_for(vc["sd_between_ci"][1], vc["sd_within"], effect, cost_start=cs,
                                         cost_repeat=cr, alpha=alpha, power=power)
        out["costs"] = costs
    sh = repeats_for_halfwidth(sd_unit, effect, alpha=alpha)
    sp = repeats_needed(sd_unit, effect, alpha=alpha, power=power)
    out.update(unit="session", repeats_per_session=r, sd_session=sd_unit, sessions_halfwidth=sh, sessions_power=sp,
               repeats_halfwidth=sh * r, repeats_power=sp * r,
               note=((f"between-session sd {vc['sd_between']:.4f} vs within {vc['sd_within']:.4f}: "
                      if "components" in out else "one repeat per start (the two sd not separable): ")
                     + f"the server start is the unit; with {r} repeat(s) per session" + rough))
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


def run_costs(events: Sequence[dict]) -> dict[str, Any]:
    """Measured costs from a run's events.jsonl: a server start (engine_ready seconds plus its warm-up) and a
    repeat (the median over repeats of the summed trial durations of one repeat, trial ids r<repeat>-c<point>)."""
    starts = [float(e["seconds"]) for e in events if e.get("event") == "engine_ready"
              and isinstance(e.get("seconds"), (int, float))]
    warm, t0 = [], None
    for e in events:
        if e.get("event") == "warmup_start":
            t0 = e.get("t_unix")
        elif e.get("event") == "warmup_done" and t0 is not None:
            warm.append(float(e["t_unix"]) - float(t0))
            t0 = None
    begun: dict[str, float] = {}
    per_repeat: dict[str, float] = {}
    for e in events:
        tid = e.get("trial")
        if e.get("event") == "trial_start" and tid:
            begun[tid] = float(e["t_unix"])
        elif e.get("event") == "trial_complete" and tid in begun:
            rep = str(tid).split("-")[0]
            per_repeat[rep] = per_repeat.get(rep, 0.0) + float(e["t_unix"]) - begun.pop(tid)
    start = float(np.median(starts)) + (float(np.median(warm)) if warm else 0.0) if starts else None
    repeat = float(np.median(list(per_repeat.values()))) if per_repeat else None
    return {"start_s": start, "repeat_s": repeat, "starts_measured": len(starts), "repeats_measured": len(per_repeat)}


MAX_REPEATS_PER_START = 12


def design_for(sd_between: float, sd_within: float, effect: float, *, cost_start: float | None,
               cost_repeat: float | None, alpha: float = 0.05, power: float = 0.8) -> dict[str, Any]:
    """Server starts x repeats per start for `power` to find a true `effect` with the start as the unit.

    Repeats per start: the cost optimum r* = (sd_within / sd_between) sqrt(cost of a start / cost of a repeat)
    (rounded, at least 1; 1 without costs), then the fewest starts whose t test (starts - 1 df, unit sd
    sqrt(sd_between^2 + sd_within^2 / r)) reaches the power; the time is starts x (start + r repeats)."""
    if cost_start and cost_repeat and sd_between > 0:
        r = int(min(MAX_REPEATS_PER_START, max(1, round(sd_within / sd_between * math.sqrt(cost_start / cost_repeat)))))
    elif cost_start and cost_repeat:
        r = MAX_REPEATS_PER_START  # no between-start variance seen: repeats are as good as starts and cheaper
    else:
        r = 1
    sd_unit = math.sqrt(sd_between ** 2 + sd_within ** 2 / r)
    k = max(CLAIM_MIN_STARTS, repeats_needed(sd_unit, effect, alpha=alpha, power=power))
    time_s = k * (cost_start + r * cost_repeat) if cost_start and cost_repeat else None
    return {"repeats_per_start": r, "starts": k, "sd_unit": sd_unit, "time_s": time_s}
