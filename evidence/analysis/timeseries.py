"""What happens inside a trial: per-interval series, the steady-state window, waves, and regimes.

All times are seconds on the trial clock (the records' and the telemetry's shared t0).

- `trial_series`: bins of `bin_s` (0.25 s): output tokens/s from the records' chunk arrival times
  (each request's completion tokens spread evenly over its token-bearing chunks, since a chunk
  can carry several tokens), the mean number of requests in flight (send to end of stream), and
  the server's running / waiting requests from the sampled /metrics rows (mean of the samples
  in the bin; absent with a reason when the server did not expose them).
- `steady_state`: the drain at the end is cut first (the window ends at the last bin whose mean
  in-flight is at least 95% of the trial's peak: after it the closed loop runs at falling
  concurrency), then MSER-5 (White 1997) picks the start: the per-bin throughput is grouped in
  batches of 5 bins and the truncation d (in batches, at most half of them) minimising
  sum((Y_i - mean_d)^2) / (n - d)^2 over the kept batch means is the warm-up. A Spearman trend
  test over 10 batch means of the window follows (scipy.stats.spearmanr): |rho| > 0.65 with
  p < 0.05 means the throughput still drifts, so the trial has no steady state, and the note says
  how long a trial would have to be for the question to be asked again. What "no trend" is worth is
  stated with it: the drift the test would have found with 80% power (`detectable_drift`, below).
- `waves`: lockstep waves show as a strong periodic component of the per-bin throughput in the
  window (the highest autocorrelation peak past the first zero crossing, after removing the
  linear trend) or as a bimodal per-bin distribution (Sarle's bimodality coefficient).
- `regimes`: across repeats of one point, the best split of the trial throughputs into two groups
  of at least two (exact in one dimension); a bimodal set when the variance it explains is
  improbable for one normal population (p < 0.05 by a seeded simulation) and Ashman's D > 2.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Sequence

import numpy as np
from scipy import stats

from evidence.records import RequestRecord

BATCH = 5  # MSER-5
FULL_SHARE = 0.95  # in-flight at least this share of the peak counts as full concurrency
TREND_BATCHES = 10
TREND_RHO, TREND_P = 0.65, 0.05
WAVE_ACF = 0.3  # an autocorrelation peak at least this high (and above 3/sqrt(n)) is a wave
BIMODAL_BC = 5 / 9  # Sarle's coefficient of a uniform distribution; above it suggests two modes
REGIME_D = 2.0  # Ashman's D above which two groups are cleanly separated
REGIME_P, REGIME_SIMS, REGIME_SEED = 0.05, 4000, 20261203
DRIFT_POWER, DRIFT_SIMS, DRIFT_SEED = 0.80, 5000, 20261206


@dataclass(frozen=True)
class Series:
    bin_s: float
    t: tuple[float, ...]  # start of each bin
    output_tps: tuple[float, ...]  # output tokens/s in each bin (client records)
    in_flight: tuple[float, ...]  # mean requests in flight over each bin
    running: tuple[float | None, ...] | None = None  # server's running requests (mean of samples in the bin)
    waiting: tuple[float | None, ...] | None = None
    absent: dict[str, str] = field(default_factory=dict)  # series not available -> why
    n_requests: int = 0
    duration_s: float = 0.0  # to the last request's end
    output_tokens: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _as_record(r: RequestRecord | dict) -> RequestRecord:
    return r if isinstance(r, RequestRecord) else RequestRecord.from_dict(r)


def trial_series(records: Iterable[RequestRecord | dict], telemetry_rows: Iterable[dict] | None, *,
                 bin_s: float = 0.25) -> Series:
    """Per-bin series of one trial's measured requests and its /metrics samples."""
    if not (math.isfinite(bin_s) and bin_s > 0):
        raise ValueError(f"bin_s must be a positive number of seconds, not {bin_s}")
    recs = [r for r in (_as_record(x) for x in records) if r.phase == "measure"]
    absent: dict[str, str] = {}
    if not recs:
        raise ValueError("no measured requests in this trial: there is no series to draw")
    ends = np.array([r.end_s if r.end_s is not None else (r.chunk_s[-1] if r.chunk_s else r.send_s) for r in recs])
    sends = np.array([r.send_s for r in recs])
    duration = float(max(ends.max(), sends.max()))
    nb = max(1, math.ceil(duration / bin_s))
    edges = np.arange(nb + 1) * bin_s
    times, weights = [], []
    for r in recs:
        if r.ok and r.chunk_s:
            tok = r.completion_tokens if r.completion_tokens is not None else len(r.chunk_s)
            times.extend(r.chunk_s)
            weights.extend([tok / len(r.chunk_s)] * len(r.chunk_s))
    idx = np.minimum((np.asarray(times, dtype=float) / bin_s).astype(int), nb - 1) if times else np.zeros(0, int)
    tokens = np.bincount(idx, weights=np.asarray(weights, dtype=float), minlength=nb)
    if not times:
        absent["output_tps"] = "no successful request carried a token"
    # time-weighted in-flight: the integral of the in-flight count up to t is
    # sum_i max(0, t - send_i) - max(0, t - end_i); its differences over the bins, per bin_s
    ends = np.maximum(ends, sends)
    integral = _ramp_sum(np.sort(sends), edges) - _ramp_sum(np.sort(ends), edges)
    in_flight = np.diff(integral) / bin_s
    running = waiting = None
    rows = list(telemetry_rows or [])
    if not rows:
        absent["running"] = absent["waiting"] = "no /metrics samples in this trial (telemetry off or unreachable)"
    else:
        running = _binned(rows, "num_requests_running", nb, bin_s, absent, "running")
        waiting = _binned(rows, "num_requests_waiting", nb, bin_s, absent, "waiting")
    return Series(bin_s=bin_s, t=tuple(float(x) for x in edges[:-1]), output_tps=tuple(float(x) for x in tokens / bin_s),
                  in_flight=tuple(float(x) for x in in_flight), running=running, waiting=waiting, absent=absent,
                  n_requests=len(recs), duration_s=duration, output_tokens=float(tokens.sum()))


def _ramp_sum(x_sorted: np.ndarray, t: np.ndarray) -> np.ndarray:
    """sum_i max(0, t - x_i) for each t."""
    k = np.searchsorted(x_sorted, t, side="right")
    c = np.concatenate([[0.0], np.cumsum(x_sorted)])
    return k * t - c[k]


def _binned(rows: list[dict], key: str, nb: int, bin_s: float, absent: dict, name: str) -> tuple | None:
    pts = [(float(r["t_s"]), float(r[key])) for r in rows
           if key in r and r.get("t_s") is not None and r[key] is not None and math.isfinite(float(r[key]))]
    if not pts:
        absent[name] = f"the server's /metrics did not expose {key}"
        return None
    sums, counts = np.zeros(nb), np.zeros(nb)
    for t, v in pts:
        i = int(t // bin_s)
        if 0 <= i < nb:
            sums[i] += v
            counts[i] += 1
    return tuple(float(s / c) if c else None for s, c in zip(sums, counts))


@dataclass(frozen=True)
class Steady:
    start_s: float
    end_s: float
    method: str
    throughput: float | None  # output tokens/s over the window
    whole_throughput: float | None  # output tokens / time to the last request's end
    trend_rho: float | None
    trend_p: float | None
    steady: bool
    note: str
    needed_s: float | None = None  # when there is no steady state: the trial length the plan would need at least
    needed_prompts: int | None = None
    batch_means: tuple[float, ...] = ()
    # the linear drift over the window (first to last, a fraction of its mean) the trend test finds with 80% power
    detectable_drift: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _trend_found(bm: np.ndarray) -> np.ndarray:
    """The trend rule on rows of batch means (m, TREND_BATCHES): |Spearman rho| > TREND_RHO with p < TREND_P, p from
    the t approximation scipy.stats.spearmanr uses (no ties in continuous data)."""
    n = bm.shape[1]
    ranks = np.argsort(np.argsort(bm, axis=1), axis=1).astype(float)
    d = ranks - np.arange(n, dtype=float)
    rho = 1 - 6 * (d * d).sum(axis=1) / (n * (n * n - 1))
    with np.errstate(divide="ignore"):
        t = rho * np.sqrt((n - 2) / np.maximum(1 - rho * rho, 1e-300))
    p = 2 * stats.t.sf(np.abs(t), n - 2)
    return (np.abs(rho) > TREND_RHO) & (p < TREND_P)


@lru_cache(maxsize=1)
def drift_to_noise_80() -> float:
    """k such that a linear drift of k residual sds over the window (first batch to last) is found by the trend test
    in DRIFT_POWER of trials. Spearman's rho depends only on the ranks, so the power depends on nothing but k (normal
    residuals assumed); it is found once by bisection on a seeded simulation (the same noise for every k, so the
    power is monotone in k and the answer deterministic)."""
    noise = np.random.default_rng(DRIFT_SEED).standard_normal((DRIFT_SIMS, TREND_BATCHES))
    slope = (np.arange(TREND_BATCHES) - (TREND_BATCHES - 1) / 2) / TREND_BATCHES  # total change 1 over the window
    lo, hi = 0.0, 20.0
    for _ in range(24):  # to 20 / 2**24 of a residual sd
        k = (lo + hi) / 2
        if _trend_found(noise + k * slope).mean() >= DRIFT_POWER:
            hi = k
        else:
            lo = k
    return hi


def detectable_drift(batch_means: np.ndarray) -> float | None:
    """The drift over the window (a fraction of its mean) the trend test would have found with 80% power: the batch
    means' residual sd about their least-squares line (the noise the test saw, the drift itself taken out) times
    drift_to_noise_80(), over the mean. None when the level is not positive."""
    bm = np.asarray(batch_means, dtype=float)
    level = float(bm.mean())
    if not level > 0:
        return None
    x = np.arange(len(bm), dtype=float)
    resid = bm - np.polyval(np.polyfit(x, bm, 1), x)
    sd = float(np.sqrt((resid * resid).sum() / (len(bm) - 2)))
    return drift_to_noise_80() * sd / level


def _mser(y: np.ndarray) -> int:
    """MSER truncation (in batches) over batch means y, searched over the first half."""
    n = len(y)
    best, best_d = math.inf, 0
    for d in range(0, n // 2 + 1):
        rest = y[d:]
        v = float(((rest - rest.mean()) ** 2).sum()) / (n - d) ** 2
        if v < best - 1e-12 * max(1.0, abs(best) if math.isfinite(best) else 1.0):
            best, best_d = v, d
    return best_d


def steady_state(series: Series) -> Steady:
    """The steady-state window of one trial (MSER-5 start, full-concurrency end) and a trend test over it."""
    y = np.asarray(series.output_tps, dtype=float)
    fl = np.asarray(series.in_flight, dtype=float)
    b = series.bin_s
    whole = series.output_tokens / series.duration_s if series.duration_s > 0 and series.output_tokens else None
    full = np.nonzero(fl >= FULL_SHARE * fl.max())[0] if len(fl) and fl.max() > 0 else np.zeros(0, int)
    end_bin = int(full[-1]) + 1 if len(full) else len(y)
    nbat = end_bin // BATCH
    base = dict(method="MSER-5", whole_throughput=whole)
    if nbat < 4:
        return Steady(start_s=0.0, end_s=end_bin * b, throughput=None, trend_rho=None, trend_p=None, steady=False,
                      note=f"the full-concurrency part ({end_bin * b:.2f} s) is too short for MSER-5 "
                           f"(fewer than 4 batches of {BATCH} bins): no steady state can be shown", **base)
    means = y[: nbat * BATCH].reshape(nbat, BATCH).mean(axis=1)
    d = _mser(means)
    s_bin, e_bin = d * BATCH, nbat * BATCH
    win = y[s_bin:e_bin]
    tp = float(win.mean())
    start_s, end_s = s_bin * b, e_bin * b
    if len(win) < 2 * TREND_BATCHES:
        return Steady(start_s=start_s, end_s=end_s, throughput=tp, trend_rho=None, trend_p=None, steady=False,
                      note=f"the window ({end_s - start_s:.2f} s) is too short for a trend test over "
                           f"{TREND_BATCHES} batch means: whether a steady state exists cannot be told", **base)
    bm = np.array([c.mean() for c in np.array_split(win, TREND_BATCHES)])
    res = stats.spearmanr(np.arange(TREND_BATCHES), bm)
    rho, p = float(res.statistic), float(res.pvalue)
    if not math.isfinite(rho):  # a constant window has no trend
        rho, p = 0.0, 1.0
    drift = abs(rho) > TREND_RHO and p < TREND_P
    seen = detectable_drift(bm)
    common = dict(start_s=start_s, end_s=end_s, throughput=tp, trend_rho=rho, trend_p=p,
                  batch_means=tuple(float(x) for x in bm), detectable_drift=seen, **base)
    if not drift:
        could = (f"; a drift of ±{100 * seen:.1f}% over this window could have been seen (80% power)"
                 if seen is not None else "")
        return Steady(steady=True, note=(f"steady from {start_s:.2f} s to {end_s:.2f} s (MSER-5 start, full-concurrency "
                                         f"end): no trend detected over {TREND_BATCHES} batch means (Spearman rho "
                                         f"{rho:+.2f}, p {p:.3g}){could}"), **common)
    # The drift spans the whole window, so the transient is at least as long as the trial's
    # full-concurrency part; MSER needs the warm-up to be at most half the run: twice as long, at least.
    needed = 2 * end_s
    per_s = series.n_requests / series.duration_s if series.duration_s > 0 else None
    prompts = int(math.ceil(per_s * needed)) if per_s else None
    return Steady(steady=False, needed_s=needed, needed_prompts=prompts, note=(
        f"no steady state: throughput {'rises' if rho > 0 else 'falls'} through the window {start_s:.2f}-{end_s:.2f} s "
        f"(Spearman rho {rho:+.2f} over {TREND_BATCHES} batch means, p {p:.3g}; first {bm[0]:.0f}, last {bm[-1]:.0f} tok/s); "
        f"the steady-state throughput is not a stable level. A trial would need at least {needed:.0f} s "
        + (f"(about {prompts} prompts at this trial's pace) " if prompts else "")
        + "to test again whether a level exists"), **common)


def _bimodality(x: np.ndarray) -> float | None:
    n = len(x)
    if n < 4 or np.std(x) == 0:
        return None
    g = stats.skew(x, bias=False)
    k = stats.kurtosis(x, bias=False)  # excess
    return float((g * g + 1) / (k + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3))))


def waves(series: Series, steady: Steady | None = None) -> dict | None:
    """A strong periodic component or bimodality of the per-bin throughput in the window; None if neither."""
    st = steady or steady_state(series)
    b = series.bin_s
    y = np.asarray(series.output_tps, dtype=float)[int(round(st.start_s / b)):int(round(st.end_s / b))]
    n = len(y)
    if n < 16 or np.std(y) == 0:
        return None
    x = np.arange(n)
    r = y - np.polyval(np.polyfit(x, y, 1), x)  # the drift is the trend test's business, not a wave
    f = np.fft.rfft(r, 2 * n)
    acf = np.fft.irfft(f * np.conj(f))[:n]
    acf = acf / acf[0]
    out: dict[str, Any] = {"bins": n, "bin_s": b, "cv": float(np.std(y) / np.mean(y)) if np.mean(y) else None,
                           "p10_tps": float(np.percentile(y, 10)), "p90_tps": float(np.percentile(y, 90))}
    neg = np.nonzero(acf[1:] < 0)[0]
    periodic = False
    if len(neg):
        lo = int(neg[0]) + 1
        hi = n // 3
        if hi > lo + 1:
            seg = acf[lo:hi]
            j = int(np.argmax(seg))
            peak, lag = float(seg[j]), lo + j
            out.update(period_s=lag * b, autocorr=peak)
            periodic = peak >= max(WAVE_ACF, 3 / math.sqrt(n)) and 0 < j < len(seg) - 1
    bc = _bimodality(y)
    out["bimodality_coefficient"] = bc
    bimodal = bc is not None and bc > BIMODAL_BC
    if not (periodic or bimodal):
        return None
    kinds = [k for k, on in (("periodic", periodic), ("bimodal", bimodal)) if on]
    out["kind"] = "+".join(kinds)
    parts = []
    if periodic:
        parts.append(f"a periodic component of {out['period_s']:.2f} s (autocorrelation {out['autocorr']:.2f})")
    if bimodal:
        parts.append(f"a bimodal per-{b:g}-s throughput (bimodality coefficient {bc:.2f} > {BIMODAL_BC:.3f})")
    out["note"] = ("throughput moves in waves: " + " and ".join(parts)
                   + f"; per-bin throughput p10 {out['p10_tps']:.0f}, p90 {out['p90_tps']:.0f} tok/s")
    return out


def _best_split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For sorted rows x (m, n): (share of the variance the best two-group split explains, its size k)."""
    n = x.shape[1]
    c1, c2 = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
    tot1, tot2 = c1[:, -1:], c2[:, -1:]
    k = np.arange(2, n - 1)  # at least two trials in each group
    lo1, lo2 = c1[:, k - 1], c2[:, k - 1]
    hi1, hi2 = tot1 - lo1, tot2 - lo2
    ssw = (lo2 - lo1 ** 2 / k) + (hi2 - hi1 ** 2 / (n - k))
    sst = (tot2 - tot1 ** 2 / n)[:, 0]
    j = np.argmin(ssw, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = 1 - ssw[np.arange(len(x)), j] / sst
    return r2, k[j]


def regimes(trial_throughputs: Sequence[float]) -> dict | None:
    """Two regimes among the trials of one point (a bimodal set of throughputs), or None.

    The best split into two groups of at least two trials (exact in one dimension) explains a
    share R^2 of the variance. Even one normal population split at its best explains a lot (about
    2/pi for many trials), so R^2 is tested against its law for n trials from one normal
    population (a seeded simulation of REGIME_SIMS sets): regimes when that p < REGIME_P and
    Ashman's D between the groups exceeds 2."""
    x = np.sort(np.asarray([float(v) for v in trial_throughputs if v is not None], dtype=float))
    n = len(x)
    if n < 4 or np.std(x) == 0:
        return None
    r2, k = _best_split(x[None, :])
    r2, k = float(r2[0]), int(k[0])
    null = np.sort(np.random.default_rng(REGIME_SEED).standard_normal((REGIME_SIMS, n)), axis=1)
    null_r2, _ = _best_split(null)
    p = float((1 + np.sum(null_r2 >= r2 - 1e-12)) / (1 + REGIME_SIMS))
    lo, hi = x[:k], x[k:]
    v = lo.var(ddof=1) + hi.var(ddof=1)
    d = math.inf if v == 0 else float(math.sqrt(2) * (hi.mean() - lo.mean()) / math.sqrt(v))
    if not (p < REGIME_P and d > REGIME_D):
        return None
    grp = lambda g: {"n": int(len(g)), "mean": float(g.mean()), "min": float(g.min()), "max": float(g.max())}  # noqa: E731
    out = {"n": n, "low": grp(lo), "high": grp(hi), "ashman_d": d, "r2": r2, "p_value": p,
           "gap": float(hi.min() - lo.max()), "ratio": float(hi.mean() / lo.mean()) if lo.mean() else None}
    out["note"] = (f"two regimes among {n} trials: {len(lo)} at {lo.min():.0f}-{lo.max():.0f} and {len(hi)} at "
                   f"{hi.min():.0f}-{hi.max():.0f} (the split explains {100 * r2:.0f}% of the variance, p {p:.3g} "
                   f"against one normal population; Ashman's D {d:.1f}); a mean over them describes neither")
    return out
