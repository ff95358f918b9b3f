"""The sequential procedure: published boundaries, false-finding rate under the null by simulation,
early stopping on a clear effect."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from evidence.analysis.sequential import boundaries, look, look_all, spending, t_boundaries


def test_boundaries_match_the_published_ldbounds_values():
    # Lan-DeMets O'Brien-Fleming type, two-sided symmetric alpha 0.05, 5 equally spaced looks
    # (R ldbounds: 4.8769 3.3569 2.6803 2.2898 2.0310; gsDesign sfLDOF: 4.877 3.357 2.680 2.290 2.031).
    assert boundaries(5, 0.05) == pytest.approx((4.8769, 3.3569, 2.6803, 2.2898, 2.0310), abs=2e-4)
    assert boundaries(1, 0.05) == pytest.approx((stats.norm.ppf(0.975),), abs=1e-9)
    assert spending(1.0, 0.05) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        boundaries(0, 0.05)


def _run(rng, mean, sd, *, max_looks, per_block, alpha=0.05):
    """One simulated sequence; returns (the look it stopped at, verdict)."""
    d = rng.normal(mean, sd, size=max_looks * per_block)
    pairs = [(1000.0 * math.exp(x), 1000.0) for x in d]
    for k in range(1, max_looks + 1):
        dec = look(pairs[: k * per_block], look_index=k, max_looks=max_looks, alpha=alpha, block_pairs=per_block)
        assert dec.look["n_pairs"] == k * per_block and "O'Brien-Fleming" in dec.rule
        if dec.decided:
            return k, dec.verdict
    raise AssertionError("the last look must decide")


def _null_t(sizes, n_sim, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 0.1, size=(n_sim, sizes[-1]))  # any sd: the t law does not depend on it
    idx = np.array(sizes) - 1
    n = np.array(sizes, dtype=float)
    s1, s2 = np.cumsum(x, axis=1)[:, idx], np.cumsum(x * x, axis=1)[:, idx]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.abs(s1 / n) / np.sqrt((s2 - s1 * s1 / n) / (n - 1) / n)


@pytest.mark.parametrize("sizes", [(2, 4, 6, 8, 10), tuple(range(1, 9)), (3, 6, 9, 12), tuple(range(2, 21, 2)),
                                   tuple(range(3, 11)), tuple(range(3, 43))])  # 3 planned repeats, then one per look
def test_false_finding_rate_under_the_null_stays_at_alpha(sizes):
    tb, _ = t_boundaries(sizes, 0.05)
    n_sim = 100_000
    t = _null_t(sizes, n_sim, seed=777)  # fresh sequences, not the calibration's
    rate = np.mean((t >= np.array(tb)).any(axis=1))
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n_sim), rate
    assert rate >= 0.045  # and the design uses its alpha, it is not needlessly conservative


def test_nominal_t_boundaries_alone_would_inflate_with_one_pair_per_look():
    # The shortcut the calibration replaces: each z boundary through its nominal t level.
    sizes = tuple(range(1, 9))
    nominal = [stats.t.isf(stats.norm.sf(c), n - 1) if n >= 2 else np.inf for c, n in zip(boundaries(8, 0.05), sizes)]
    t = _null_t(sizes, 100_000, seed=778)
    assert np.mean((t >= np.array(nominal)).any(axis=1)) > 0.055


def test_default_schedule_is_a_first_look_then_one_pair_per_look():
    # run --until-decided: the planned repeats, then one repeat (one pair) per look
    pairs = [(1000 * math.exp(0.01 * (-1) ** i), 1000.0) for i in range(5)]
    dec = look(pairs, look_index=3, max_looks=8)
    assert dec.look["planned_pairs"] == 5 and dec.look["information_fraction"] == pytest.approx(5 / 10)
    assert dec.look["boundary_method"] != "nominal (pair count off plan)"
    assert dec.look["t_boundary"] == pytest.approx(t_boundaries(tuple(range(3, 11)), 0.05)[0][2])


def test_look_end_to_end_on_null_sequences():
    rng = np.random.default_rng(12)
    n_sim = 400
    found = sum(_run(rng, 0.0, 0.1, max_looks=5, per_block=2)[1] == "finding" for _ in range(n_sim))
    assert found / n_sim <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n_sim)


def test_naive_peeking_would_inflate_it():
    # The same sequences tested at a fixed 5% after every block: the inflation the design avoids.
    rng = np.random.default_rng(12)
    d = rng.normal(0.0, 0.1, size=(3000, 10))
    p = np.array([stats.ttest_1samp(d[:, : 2 * k], 0.0, axis=1).pvalue for k in range(1, 6)])
    assert np.mean((p < 0.05).any(axis=0)) > 0.08


def test_clear_effect_stops_early_and_null_runs_to_the_budget():
    rng = np.random.default_rng(3)
    stops = [_run(rng, 0.3, 0.1, max_looks=5, per_block=2) for _ in range(200)]
    assert all(v == "finding" for _, v in stops)
    assert np.mean([k for k, _ in stops]) < 4
    k, v = _run(np.random.default_rng(5), 0.0, 0.1, max_looks=5, per_block=2)
    assert v in ("not significant", "finding")
    dec = look([(1.0, 1.0)] * 4, look_index=2, max_looks=5, futility=None)
    assert dec.verdict == "continue" and not dec.decided
    # with the futility rule (the default) no effect at all has no chance of crossing later: decided, futility
    fut = look([(1.0, 1.0)] * 4, look_index=2, max_looks=5)
    assert fut.decided and fut.verdict == "not significant" and fut.look["stop_reason"] == "futility"
    assert fut.look["conditional_power"] < 0.1


def test_look_records_every_number_and_refuses_bad_input():
    dec = look([(110.0, 100.0), (120.0, 100.0), (105.0, 100.0)], look_index=5, max_looks=5)
    for key in ("look", "n_pairs", "alpha_spent", "z_boundary", "nominal_p", "t", "p_value", "rci", "effect"):
        assert key in dec.look
    assert dec.decided  # the last look always decides
    assert dec.as_dict()["rule"] == dec.rule
    assert look([(1.0, 2.0)], look_index=1, max_looks=3).verdict == "continue"
    assert look([(1.0, 2.0)], look_index=3, max_looks=3).verdict == "no claim"
    with pytest.raises(ValueError):
        look([(1.0, 2.0)], look_index=4, max_looks=3)
    with pytest.raises(ValueError):
        look([(0.0, 2.0), (1.0, 1.0)], look_index=1, max_looks=3)


def test_look_all_splits_alpha_and_keeps_earlier_decisions():
    clear = [(1000 * math.exp(0.3 + 0.01 * i), 1000.0) for i in range(6)]
    null = [(1000 * math.exp(0.05 * (-1) ** i), 1000.0) for i in range(6)]
    done, decs = look_all({"x": clear, "y": null}, look_index=3, max_looks=5, block_pairs=2, futility=None)
    assert not done and decs["x"].verdict == "finding" and decs["y"].verdict == "continue"
    assert decs["x"].look["alpha"] == pytest.approx(0.025)
    done, decs2 = look_all({"x": clear[:2], "y": null + null[:4]}, look_index=5, max_looks=5, previous=decs,
                           block_pairs=2)
    assert done and decs2["x"] is decs["x"] and decs2["y"].verdict == "not significant"


def test_conditional_power_by_hand():
    from evidence.analysis.sequential import conditional_power
    # at half the information, z = 1: drift 1 / sqrt(0.5); B(1) ~ N(sqrt(2), 0.5): P(B(1) >= 2) = Phi((sqrt(2) - 2) / sqrt(0.5))
    assert conditional_power(1.0, 0.5, 2.0) == pytest.approx(stats.norm.cdf((math.sqrt(2) - 2) / math.sqrt(0.5)))
    assert conditional_power(3.0, 1.0, 2.0) == 1.0 and conditional_power(1.0, 1.0, 2.0) == 0.0


def test_futility_keeps_the_false_finding_rate_and_stops_nulls_early():
    rng = np.random.default_rng(21)
    n_sim = 300
    found, looks_used = 0, []
    for _ in range(n_sim):
        d = rng.normal(0.0, 0.1, size=2 + 4)
        for k in range(1, 6):
            dec = look([(math.exp(x), 1.0) for x in d[: 1 + k]], look_index=k, max_looks=5)
            if dec.decided:
                found += dec.verdict == "finding"
                looks_used.append(k)
                break
    assert found / n_sim <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n_sim)
    assert np.mean(looks_used) < 4.5  # a null mostly stops before its budget


def test_the_unit_is_the_server_start_when_sessions_are_given():
    # 3 starts of 2 pairs: the look tests the 3 start means of ln(a/b)
    d = [0.10, 0.12, 0.30, 0.32, 0.20, 0.22]
    dec = look([(math.exp(x), 1.0) for x in d], look_index=1, max_looks=3, sessions=[1, 1, 2, 2, 3, 3])
    rec = dec.look
    assert (rec["unit"], rec["n_units"], rec["n_pairs"], rec["scope"]) == ("session", 3, 6, "these 3 server starts")
    means = [0.11, 0.31, 0.21]
    t = np.mean(means) / (np.std(means, ddof=1) / math.sqrt(3))
    assert rec["t"] == pytest.approx(t, rel=1e-9) and rec["planned_pairs"] == 3
