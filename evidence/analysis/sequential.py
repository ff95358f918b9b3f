"""Adding balanced blocks of repeats until a comparison is decided, without peeking's inflation.

Procedure: a group-sequential design with Lan-DeMets alpha spending of the O'Brien-Fleming
type, two-sided and symmetric, over a declared maximum number of looks K (one look after each
balanced block). Each side spends alpha/2 as

    a(t) = 2 - 2 * Phi(z_{1 - alpha/4} / sqrt(t)),   t = n_k / n_K (information fraction: the
    planned pairs at look k over those at the last look; k / K for equal blocks),

so little is spent early and nearly the whole alpha is left for the last look (the spending
function of R's ldbounds / gsDesign `sfLDOF`; K = 5, alpha = 0.05 gives the z boundaries
4.877, 3.357, 2.680, 2.290, 2.031). The boundaries come from the joint law of the z statistics
at the looks (a Brownian motion observed at t_1..t_K), integrated numerically on a grid
(Armitage, McPherson & Rowe's recursion; scipy's multivariate normal CDF gives the same
numbers but takes a minute for five looks).

The statistic at each look is the paired t statistic of ln(a/b) over the pairs so far (the
same as evidence.analysis.stats.paired). The variance is estimated, and the usual shortcut (use
each z boundary through its nominal level, |t| >= t_{1-p_k/2}(n-1)) lets the false-finding rate
reach 6.3% at 5% with one pair per look (checked by simulation). So the t boundaries are
calibrated instead: under the null with normal log ratios the joint law of the t statistics at
the planned pair counts does not depend on the unknown sd, and a seeded simulation of 400,000
null sequences (fewer past 20 looks, to bound memory) gives, look by look, the |t| boundary at
which the cumulative crossing rate equals the same spending function less two Monte Carlo
standard errors, so the simulation's own error cannot push the rate above alpha (it costs about
0.0007 of a 0.05 alpha). Looks whose alpha increment is too small to resolve (fewer than 50
simulated crossings) use the nominal-level boundary, whose exact marginal rate is that
increment. Past 100 pairs at the last look the nominal boundaries are used (the t law is then
close to normal where the alpha is spent). tests/analysis/test_sequential.py checks the
false-finding rate on fresh sequences.

The unit (`sessions`): when the pairs come from 2 or more server starts (the spec has
sweep.sessions > 1, and every added block is a start of its own) the unit is the start, valued
by the mean ln(a/b) over its repeats, as in evidence.analysis.stats: the planned starts make the
first look's units and each block adds one. With one start the unit is the pair, and the scope
of every decision is that server start.

Decisions: crossing at any look -> `finding` (decided, stop adding blocks for it); reaching
look K without crossing -> `not significant` (decided: the budget is spent); otherwise
`continue`, unless the futility rule stops it: from look 2 on, before the last, when the
conditional power under the current trend (the chance of crossing at look K if the effect
estimated so far were the truth, Brownian-motion approximation on the z scale) is below
FUTILITY_CP, the comparison is decided `not significant` (stop_reason "futility"). The rule
is non-binding: the efficacy boundaries are those computed without it, so it can only lower
the false-finding rate (and costs some power, bench/RESULTS-sessions.md). Each look carries the
repeated confidence interval at that look's nominal level, which (unlike the fixed-n
interval) stays valid whenever the design stops. Several declared comparisons: each gets
alpha / m (Bonferroni over the m comparisons), which keeps the family-wise rate at alpha.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import integrate, optimize, stats

GRID = 401  # points per look in the numerical integration; 401 agrees with 2001 to 1e-9
N_SIM = 400_000  # null sequences for the t calibration (MC error of the total alpha ~0.00035)
MIN_CROSS = 50  # fewer simulated crossings than this at a look: use its nominal-level boundary
CAL_SEED = 20261203
MAX_CAL_CELLS = 8_000_000  # fewer simulated sequences when there are many looks (the margin grows to match)
MAX_CAL_PAIRS = 100  # beyond this many pairs at the last look: nominal boundaries (df large where alpha is spent)
FUTILITY_CP = 0.10  # stop for futility below this conditional power under the current trend (non-binding)


def rule_text(max_looks: int, alpha: float, m: int = 1) -> str:
    per = f"alpha {alpha:g}" + (f" / {m} comparisons (Bonferroni) = {alpha / m:.4g}" if m > 1 else "")
    return (f"group-sequential, Lan-DeMets O'Brien-Fleming-type alpha spending (two-sided, symmetric, "
            f"{per}) over at most {max_looks} equally spaced looks; at each look the paired t-test on ln(a/b) "
            "crosses when |t| reaches the look's boundary (calibrated by simulation to the t law at the planned "
            "unit counts (the server start when the run has several, else the pair); crossing -> finding and "
            f"stop; from look 2 before the last, conditional power under the current trend below {FUTILITY_CP:g} -> "
            "not significant (futility, non-binding); the last look without crossing -> not significant")


def spending(t: float, alpha: float) -> float:
    """Cumulative two-sided alpha spent by information fraction t (each side alpha/2, O'Brien-Fleming type)."""
    if t <= 0:
        return 0.0
    return 2 * (2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 4) / math.sqrt(t)))


def boundaries(max_looks: int, alpha: float) -> tuple[float, ...]:
    """z boundaries c_1..c_K for K equally spaced looks (|Z_k| >= c_k crosses)."""
    if not (isinstance(max_looks, int) and max_looks >= 1):
        raise ValueError(f"max_looks must be a whole number >= 1, not {max_looks!r}")
    return z_boundaries(tuple((k + 1) / max_looks for k in range(max_looks)), alpha)


@lru_cache(maxsize=64)
def z_boundaries(fractions: tuple[float, ...], alpha: float) -> tuple[float, ...]:
    """z boundaries at the looks' information fractions (increasing, the last 1)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, not {alpha}")
    if not fractions or abs(fractions[-1] - 1) > 1e-12 or any(b <= a for a, b in zip(fractions, fractions[1:])) \
            or fractions[0] <= 0:
        raise ValueError(f"information fractions must increase from above 0 to 1, not {fractions}")
    t = np.array(fractions, dtype=float)
    spent = np.array([spending(x, alpha) for x in t])
    inc = np.diff(np.concatenate([[0.0], spent]))
    out: list[float] = []
    grid = dens = None
    prev = 0.0
    for k in range(len(t)):
        sd = math.sqrt(t[k] - prev)
        if k == 0:
            def exit_p(c: float) -> float:
                return float(2 * stats.norm.sf(c))
        else:
            def exit_p(c: float, grid=grid, dens=dens, sd=sd, tk=t[k]) -> float:
                # P(continued so far, then |S_k| >= c sqrt(t_k)) on the score scale S = Z sqrt(t)
                b = c * math.sqrt(tk)
                e = stats.norm.cdf((-b - grid) / sd) + stats.norm.sf((b - grid) / sd)
                return float(integrate.simpson(dens * e, x=grid))
        c = optimize.brentq(lambda x: exit_p(x) - inc[k], 0.1, 60.0, xtol=1e-12)
        out.append(float(c))
        b = c * math.sqrt(t[k])
        new = np.linspace(-b, b, GRID)
        if k == 0:
            nd = stats.norm.pdf(new / sd) / sd
        else:
            kern = stats.norm.pdf((new[:, None] - grid[None, :]) / sd) / sd
            nd = integrate.simpson(kern * dens[None, :], x=grid, axis=1)
        grid, dens, prev = new, nd, t[k]
    return tuple(out)


@lru_cache(maxsize=64)
def t_boundaries(sizes: tuple[int, ...], alpha: float) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """|t| boundaries for looks after sizes[k] pairs (k = 0..K-1), and how each was set.

    Calibrated so that under the null the cumulative chance of crossing by look k is the
    O'Brien-Fleming-type spending at information fraction sizes[k] / sizes[-1]."""
    if not sizes or any(b <= a for a, b in zip(sizes, sizes[1:])) or sizes[0] < 1:
        raise ValueError(f"pair counts at the looks must increase from >= 1, not {sizes}")
    K = len(sizes)
    frac = [n / sizes[-1] for n in sizes]
    zc = z_boundaries(tuple(frac), alpha)
    nominal = [float(stats.t.isf(stats.norm.sf(c), n - 1)) if n >= 2 else math.inf for c, n in zip(zc, sizes)]
    if sizes[-1] > MAX_CAL_PAIRS:
        return tuple(nominal), tuple("nominal" for _ in sizes)
    rng = np.random.default_rng(CAL_SEED)
    idx = np.array(sizes) - 1
    n_sim = min(N_SIM, MAX_CAL_CELLS // K)  # memory: n_sim x K statistics are kept
    tabs = np.empty((n_sim, K))
    for lo in range(0, n_sim, 20_000):
        x = rng.standard_normal((min(20_000, n_sim - lo), sizes[-1]))
        s1, s2 = np.cumsum(x, axis=1)[:, idx], np.cumsum(x * x, axis=1)[:, idx]
        n = np.array(sizes, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            var = (s2 - s1 * s1 / n) / (n - 1)
            tabs[lo:lo + len(x)] = np.abs(s1 / n) / np.sqrt(var / n)
    alive = np.ones(n_sim, dtype=bool)
    crossed = 0
    out, how = [], []
    for k in range(K):
        spent = spending(frac[k], alpha) * n_sim
        target = int(spent - 2 * math.sqrt(spent))  # two MC standard errors on the safe side
        inc = target - crossed
        if sizes[k] < 2:
            b, h = math.inf, "fewer than 2 pairs"
        elif inc < MIN_CROSS:
            b, h = nominal[k], "nominal"
        else:
            vals = np.sort(tabs[alive, k])[::-1]
            b, h = float((vals[inc - 1] + vals[inc]) / 2), "calibrated"
        hit = alive & (tabs[:, k] >= b)
        crossed += int(hit.sum())
        alive &= ~hit
        out.append(b)
        how.append(h)
    return tuple(out), tuple(how)


def _rel(x: float) -> float | None:
    # exp(x) - 1, or None for an end too wide to be a number (an early look with few pairs)
    return math.expm1(x) if abs(x) < 700 else None


@dataclass(frozen=True)
class Decision:
    decided: bool
    verdict: str  # "finding" | "not significant" | "continue" | "no claim" (budget spent with < 2 pairs)
    boundary: float | None  # the |t| this look needed; None with fewer than 2 pairs
    rule: str
    look: dict[str, Any] = field(default_factory=dict)  # every number of this look, for the run's record

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def conditional_power(z: float, frac: float, final_z: float) -> float:
    """P(|Z_K| >= final_z at the last look | Z_k = z at information fraction frac), the drift set to the current
    trend z / sqrt(frac) (Brownian motion B(t) = Z sqrt(t)); the side of the current estimate only."""
    if frac >= 1:
        return float(abs(z) >= final_z)
    return float(stats.norm.cdf((abs(z) / math.sqrt(frac) - final_z) / math.sqrt(1 - frac)))


def look(pairs_so_far: Sequence[tuple[float, float]], *, look_index: int, max_looks: int, alpha: float = 0.05,
         comparisons: int = 1, higher_is_better: bool = True, block_pairs: int = 1,
         first_pairs: int | None = None, sessions: Sequence[int] | None = None,
         futility: float | None = FUTILITY_CP, unit: str | None = None) -> Decision:
    """One look (1-based `look_index` of `max_looks`) at the (a, b) pairs gathered so far.

    The planned looks: the first after `first_pairs` pairs, each later one `block_pairs` more
    (default: one repeat of every point per block, so one pair per look, and the first look had
    the rest: first_pairs = pairs so far - (look_index - 1) * block_pairs). The information
    fraction of look k is its planned pair count over the last look's. `comparisons`: the number
    of declared comparisons sharing the family-wise alpha (each gets alpha / comparisons). A
    comparison that has crossed at an earlier look is decided: do not look at it again.
    `sessions` (each pair's server start): with 2 or more starts the unit is the start (its mean ln(a/b)) and
    the counts above count starts. `futility`: the conditional-power threshold of the futility rule (None: off).
    `unit="block"`: each pair is already one block of server starts (arms), as the records then say.
    """
    if not (isinstance(look_index, int) and isinstance(max_looks, int) and 1 <= look_index <= max_looks):
        raise ValueError(f"look_index must be 1..{max_looks}, not {look_index!r}")
    if comparisons < 1:
        raise ValueError(f"comparisons must be >= 1, not {comparisons}")
    pairs = [(float(x), float(y)) for x, y in pairs_so_far]
    if any(not (math.isfinite(v) and v > 0) for p in pairs for v in p):
        raise ValueError("every value in a sequential look must be a finite positive number (the test is on ln(a/b))")
    if sessions is not None and len(sessions) != len(pairs):
        raise ValueError(f"{len(sessions)} session labels for {len(pairs)} pairs")
    by_start = sessions is not None and len(set(sessions)) >= 2
    n_pairs = len(pairs)
    if by_start:
        d_all = np.log(np.array([p[0] for p in pairs]) / np.array([p[1] for p in pairs]))
        labels = sorted(set(sessions))
        units = [float(d_all[np.asarray(sessions) == s].mean()) for s in labels]
        pairs = [(math.exp(u), 1.0) for u in units]  # one unit per start: its mean ln ratio
    n = len(pairs)
    if first_pairs is None:
        first_pairs = max(1, n - (look_index - 1) * block_pairs)
    if block_pairs < 1 or first_pairs < 1:
        raise ValueError(f"block_pairs and first_pairs must be >= 1, not {block_pairs}, {first_pairs}")
    a_alpha = alpha / comparisons
    rule = rule_text(max_looks, alpha, comparisons)
    sizes = tuple(first_pairs + block_pairs * k for k in range(max_looks))
    frac = sizes[look_index - 1] / sizes[-1]
    tb_all, how = t_boundaries(sizes, a_alpha)
    tb = tb_all[look_index - 1]
    final = look_index == max_looks
    rec: dict[str, Any] = {"look": look_index, "max_looks": max_looks, "n_pairs": n_pairs, "n_units": n,
                           "unit": unit or ("session" if by_start else "repeat"),
                           "scope": (f"these {n} blocks of server starts" if unit == "block" else
                                     f"these {n} server starts" if by_start else "this server start"),
                           "planned_pairs": sizes[look_index - 1],
                           "information_fraction": frac, "alpha": a_alpha,
                           "alpha_spent": spending(frac, a_alpha),
                           "z_boundary": z_boundaries(tuple(x / sizes[-1] for x in sizes), a_alpha)[look_index - 1],
                           "t_boundary": tb if math.isfinite(tb) else None, "boundary_method": how[look_index - 1]}
    if n < 2:
        rec.update(t=None, p_value=None, effect=None, rci=None)
        return Decision(final, "no claim" if final else "continue", None, rule, rec)
    d = np.log(np.array([p[0] for p in pairs]) / np.array([p[1] for p in pairs]))
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if not math.isfinite(tb) or n != sizes[look_index - 1]:
        # an off-plan pair count: the nominal boundary for the pairs actually there
        tb = float(stats.t.isf(stats.norm.sf(rec["z_boundary"]), n - 1))
        rec.update(t_boundary=tb, boundary_method="nominal (pair count off plan)")
    rec["nominal_p"] = float(2 * stats.t.sf(tb, n - 1))
    if sd > 0:
        tstat = mean / (sd / math.sqrt(n))
        half = tb * sd / math.sqrt(n)
        rci = [_rel(mean - half), _rel(mean + half)]
    else:
        tstat = 0.0 if mean == 0 else math.copysign(math.inf, mean)
        rci = [math.expm1(mean), math.expm1(mean)]
    rec.update(t=tstat if math.isfinite(tstat) else None, p_value=float(2 * stats.t.sf(abs(tstat), n - 1)),
               effect=float(np.mean(np.exp(d) - 1)), ratio_effect=math.expm1(mean), rci=rci,
               wins_a=int(((d > 0) if higher_is_better else (d < 0)).sum()),
               wins_b=int(((d < 0) if higher_is_better else (d > 0)).sum()))
    if abs(tstat) >= tb:
        return Decision(True, "finding", tb, rule, rec)
    if futility is not None and not final and look_index >= 2:
        # the current trend on the z scale: the t statistic's two-sided p read as a normal z
        z = float(stats.norm.isf(rec["p_value"] / 2)) if rec["p_value"] > 0 else math.inf
        zk = z_boundaries(tuple(x / sizes[-1] for x in sizes), a_alpha)[-1]
        cp = conditional_power(z, frac, zk)
        rec.update(conditional_power=cp, futility_threshold=futility)
        if cp < futility:
            rec["stop_reason"] = "futility"
            return Decision(True, "not significant", tb, rule, rec)
    return Decision(final, "not significant" if final else "continue", tb, rule, rec)


def look_all(pairs: Mapping[str, Sequence[tuple[float, float]]], *, look_index: int, max_looks: int,
             alpha: float = 0.05, previous: Mapping[str, Decision] | None = None,
             higher_is_better: Mapping[str, bool] | None = None, block_pairs: int = 1,
             first_pairs: int | None = None, futility: float | None = FUTILITY_CP) -> tuple[bool, dict[str, Decision]]:
    """Look at every declared comparison (name -> its pairs so far). Comparisons already decided in
    `previous` keep their decision. Returns (every comparison decided, name -> Decision)."""
    m = len(pairs)
    out: dict[str, Decision] = {}
    for name, ps in pairs.items():
        old = (previous or {}).get(name)
        if old is not None and old.decided:
            out[name] = old
            continue
        hib = True if higher_is_better is None else higher_is_better.get(name, True)
        out[name] = look(ps, look_index=look_index, max_looks=max_looks, alpha=alpha, comparisons=m,
                         higher_is_better=hib, block_pairs=block_pairs, first_pairs=first_pairs, futility=futility)
    return all(d.decided for d in out.values()), out
