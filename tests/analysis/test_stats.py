"""Known answers for the paired procedure: hand-computed or from scipy, and the published H200 run."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from evidence.analysis.stats import holm, holm_adjust, paired, repeats_for_halfwidth, repeats_needed

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "releases/article1-h200-v1.0/data/raw/h200-a100sched/trials"


def _from_logs(d, b=1000.0):
    return [b * math.exp(x) for x in d], [b] * len(d)


def test_h200_a100_settings_c128_vs_c256_is_not_significant():
    # The numbers: p = 0.105, 95% interval [-5.9%, +34.2%]; the old rule called it a knee.
    tp = {}
    for p in (128, 256):
        tp[p] = [json.loads((H200 / f"r{r}-c{p}/summary.json").read_text())["output_throughput"] for r in (1, 2, 3)]
    r = paired(tp[128], tp[256], a=128, b=256, metric="output_throughput")
    assert r.verdict == "not significant"
    assert r.p_value == pytest.approx(0.105, abs=5e-4)
    assert r.ci95[0] == pytest.approx(-0.059, abs=5e-4) and r.ci95[1] == pytest.approx(0.342, abs=5e-4)
    assert r.effect == pytest.approx(0.126, abs=5e-4)  # the mean relative paired difference (+12.6%)
    assert r.wins_a == 3 and r.wins_b == 0
    assert r.sign_p == 0.25 and r.perm_p == 0.25
    assert r.sign_note.startswith("n < 6: no distribution-free claim is possible at 95%")
    assert r.mde > r.effect  # the effect is below what three repeats at this noise can see


def test_t_interval_and_p_by_hand():
    # d = ln(a/b) = 0.1, 0.2, 0.3: mean 0.2, sd 0.1, t = 0.2 / (0.1/sqrt 3) = 2 sqrt 3, df 2.
    # For df 2 the t CDF is 1/2 + t / (2 sqrt(2 + t^2)), so p = 1 - t/sqrt(2 + t^2) = 1 - sqrt(12/14),
    # and the 0.975 quantile is 0.95 * sqrt(2 / (4 * 0.975 * 0.025)) = 4.30265.
    a, b = _from_logs([0.1, 0.2, 0.3])
    r = paired(a, b, a="x", b="y", metric="m")
    assert r.p_value == pytest.approx(1 - math.sqrt(12 / 14), rel=1e-9)
    tq = 0.95 * math.sqrt(2 / (4 * 0.975 * 0.025))
    half = tq * 0.1 / math.sqrt(3)
    assert r.ci95 == pytest.approx((math.exp(0.2 - half) - 1, math.exp(0.2 + half) - 1), rel=1e-9)
    assert r.halfwidth == pytest.approx(math.exp(half) - 1, rel=1e-9)
    # MDE at 80% power: the 0.8 quantile of t(2) solves t / sqrt(2 + t^2) = 0.6, t = sqrt(1.125)
    assert r.mde == pytest.approx(math.exp(half + math.sqrt(1.125) * 0.1 / math.sqrt(3)) - 1, rel=1e-9)
    assert (r.unit, r.n_units, r.df, r.scope) == ("repeat", 3, 2, "this server start")
    assert r.effect == pytest.approx(np.mean([math.exp(x) - 1 for x in (0.1, 0.2, 0.3)]), rel=1e-12)
    assert r.ratio_effect == pytest.approx(math.exp(0.2) - 1, rel=1e-12)
    assert r.verdict == "not significant" and r.better is None


def test_clear_effect_is_a_finding_and_six_wins_allow_a_distribution_free_claim():
    a, b = _from_logs([0.30, 0.35, 0.28, 0.33, 0.31, 0.29])
    r = paired(a, b, a="c4", b="c16", metric="m")
    assert r.verdict == "finding" and r.better == "c4"
    assert r.ci95[0] > 0
    assert r.sign_p == pytest.approx(2 / 2 ** 6) and r.sign_note is None
    assert r.perm_p == pytest.approx(2 / 2 ** 6)


def test_five_wins_give_sign_p_0_0625():
    a, b = _from_logs([0.1, 0.2, 0.15, 0.12, 0.3])
    r = paired(a, b, a=1, b=2, metric="m")
    assert r.sign_p == pytest.approx(0.0625) and r.sign_note is not None


def test_permutation_p_is_the_exact_sign_flip_enumeration():
    d = np.array([0.1, 0.2, -0.05, 0.3, 0.02])
    obs = abs(d.mean())
    flips = [abs((d * np.array(s)).mean()) for s in itertools.product((1, -1), repeat=len(d))]
    expect = sum(f >= obs - 1e-12 for f in flips) / len(flips)
    a, b = _from_logs(list(d))
    assert paired(a, b, a=1, b=2, metric="m").perm_p == pytest.approx(expect)


def test_lower_is_better_counts_wins_the_other_way():
    a, b = _from_logs([-0.3, -0.31, -0.29, -0.33])  # a is lower
    r = paired(a, b, a="a", b="b", metric="ttft", higher_is_better=False)
    assert r.wins_a == 4 and r.wins_b == 0 and r.verdict == "finding" and r.better == "a"
    assert r.effect < 0


def test_fewer_than_two_pairs_is_no_claim():
    r1 = paired([2.0], [1.0], a=1, b=2, metric="m")
    assert r1.verdict == "no claim" and r1.ci95 is None and r1.p_value is None and r1.effect == pytest.approx(1.0)
    r0 = paired([], [], a=1, b=2, metric="m")
    assert r0.verdict == "no claim" and r0.effect is None
    json.dumps(r0.as_dict())


def test_bad_input_is_refused_with_a_reason():
    with pytest.raises(ValueError, match="positive"):
        paired([1.0, 0.0], [1.0, 1.0], a=1, b=2, metric="m")
    with pytest.raises(ValueError, match="one value of each"):
        paired([1.0, 2.0], [1.0], a=1, b=2, metric="m")


def test_holm_adjusted_p_matches_statsmodels():
    # statsmodels.stats.multitest.multipletests([0.01, 0.04, 0.03, 0.005], method="holm")[1]
    # = [0.03, 0.06, 0.06, 0.02]; by hand: sorted 0.005*4, 0.01*3, 0.03*2, max(0.04*1, 0.06).
    assert holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjust([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_holm_verdicts_and_intervals_agree():
    rs = [paired(*_from_logs(d), a=i, b=i + 1, metric="m") for i, d in enumerate(
        [[0.30, 0.35, 0.28, 0.33, 0.31, 0.29],  # very clear
         [0.05, 0.02, 0.04, 0.01, 0.06, 0.03],  # clear-ish
         [0.05, -0.02, 0.04, 0.01, -0.03, 0.02]])]  # null
    adj = holm(rs)
    for r in adj:
        assert (r.verdict == "finding") == (r.ci95[0] > 0 or r.ci95[1] < 0)
        assert r.p_adjusted >= r.p_value
    assert [r.verdict for r in adj] == ["finding", "finding", "not significant"]
    assert adj[0].ci_level == pytest.approx(1 - 0.05 / 3)
    # One comparison alone: unchanged.
    assert holm(rs[:1])[0] == rs[0]
    # A no-claim comparison stays out of the family.
    alone = holm([rs[0], paired([1.0], [2.0], a=9, b=8, metric="m")])
    assert alone[0].p_adjusted == rs[0].p_value and alone[1].verdict == "no claim"


def test_repeats_for_the_notes_example():
    # statistics.md: paired sd ~8 points, a +-5-point interval needs about 13 repeats.
    assert repeats_for_halfwidth(0.08, 0.05) == 13


def test_repeats_needed_reaches_the_power_by_simulation():
    n = repeats_needed(0.08, 0.05)
    assert 20 <= n <= 26  # statistics.md: about 23 for 80% power at a 5-point difference
    rng = np.random.default_rng(1)
    from scipy import stats

    def sim_power(k):
        d = rng.normal(math.log(1.05), 0.08, size=(20000, k))
        return np.mean(stats.ttest_1samp(d, 0.0, axis=1).pvalue < 0.05)

    assert sim_power(n) >= 0.8 - 0.01
    assert sim_power(n - 2) < 0.8
    with pytest.raises(ValueError):
        repeats_needed(0.08, 0.0)


def test_variance_components_by_hand():
    from evidence.analysis.stats import variance_components
    # sessions [0, 0.2], [1, 1.2]: within SS = 0.02 + 0.02 over 2 df -> MSW 0.02; means 0.1, 1.1,
    # grand 0.6, MSB = 2 * (0.25 + 0.25) / 1 = 1.0; n0 = 2; sd_between = sqrt((1.0 - 0.02) / 2).
    vc = variance_components([0.0, 0.2, 1.0, 1.2], [1, 1, 2, 2])
    assert vc["sd_within"] == pytest.approx(math.sqrt(0.02))
    assert vc["sd_between"] == pytest.approx(math.sqrt(0.49))
    with pytest.raises(ValueError):
        variance_components([0.1, 0.2], [1, 2])


def test_plan_noise_picks_the_unit():
    from evidence.analysis.stats import plan_noise
    one = plan_noise([0.1, 0.05, 0.2], None, effect=0.05)
    assert one["unit"] == "repeat" and one["sessions"] is None and "not measured" in one["note"]
    assert one["repeats_halfwidth"] == repeats_for_halfwidth(one["sd_log"], 0.05)
    assert one["sd_log_ci95"][0] < one["sd_log"] < one["sd_log_ci95"][1] and "rough" in one["note"]
    split = plan_noise([0.0, 0.01, 0.02, 0.2, 0.21, 0.22, 0.1, 0.11, 0.12], [1, 1, 1, 2, 2, 2, 3, 3, 3], effect=0.05)
    assert split["unit"] == "session" and split["repeats_per_session"] == 3
    assert split["repeats_halfwidth"] == 3 * split["sessions_halfwidth"]
    assert split["sd_session"] == pytest.approx(math.sqrt(split["components"]["sd_between"] ** 2
                                                          + split["components"]["sd_within"] ** 2 / 3))
    # one repeat per start (the default design): the design stays at 1 repeat per start, its starts at the
    # estimate and at the upper end of the starts' sd interval, timed from the measured costs
    x = [0.0, 0.2, 0.1, 0.05]
    ones = plan_noise(x, [1, 2, 3, 4], effect=0.05, costs={"start_s": 60.0, "repeat_s": 30.0})
    assert "components" not in ones and ones["repeats_per_session"] == 1
    d, up = ones["design"], ones["design_upper"]
    assert d["repeats_per_start"] == up["repeats_per_start"] == 1
    assert d["starts"] == max(3, repeats_needed(ones["sd_log"], 0.05)) and d["time_s"] == d["starts"] * 90.0
    assert up["starts"] == max(3, repeats_needed(ones["sd_log_ci95"][1], 0.05)) > d["starts"]


def test_cli_plan_from_the_h200_run(tmp_path):
    import subprocess
    import sys
    run = H200.parent
    cmd = [sys.executable, "-m", "evidence.cli", "plan", str(run / "spec.yaml"), "--from", str(run), "--effect", "5%"]
    res = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    c = {(r["a"], r["b"]): r for r in out["comparisons"]}[(128, 256)]
    assert c["n_pairs"] == 3 and c["unit"] == "repeat"
    assert c["repeats_halfwidth"] == repeats_for_halfwidth(c["sd_log"], 0.05, alpha=out["alpha"])
    assert c["repeats_power"] == repeats_needed(c["sd_log"], 0.05, alpha=out["alpha"])
    bad = subprocess.run(cmd[:-1] + ["five"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not a number" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run(cmd[:6] + [str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not a run directory" in bad.stderr


def test_sessions_that_differ_make_the_session_the_unit():
    # three sessions, three repeats each; the sessions' mean log ratios differ far beyond the repeats' noise
    d = [0.00, 0.01, 0.02, 0.20, 0.21, 0.22, 0.10, 0.11, 0.12]
    a, b = _from_logs(d)
    sess = [1, 1, 1, 2, 2, 2, 3, 3, 3]
    r = paired(a, b, a=1, b=2, metric="m", sessions=sess)
    assert r.unit == "session" and r.n_units == 3 and r.n_pairs == 9
    # by hand: the t-test over the session means 0.01, 0.21, 0.11 (mean 0.11, sd 0.1, t = 0.11 / (0.1/sqrt 3))
    t = 0.11 / (0.1 / math.sqrt(3))
    assert r.p_value == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-9)  # the df-2 t CDF in closed form
    assert r.verdict == "not significant"  # over 9 pooled repeats it would be a finding
    assert paired(a, b, a=1, b=2, metric="m").verdict == "finding"
    assert r.components["sd_between"] > r.components["sd_within"]
    assert (r.df, r.scope, r.scope_note) == (2, "these 3 server starts", None)
    # sessions that do not differ: the session is still the unit (fixed by the design; a switch on the
    # between-session estimate is a pre-test that inflates false findings)
    same = paired(*_from_logs([0.0, 0.2, 0.1, 0.1, 0.0, 0.2]), a=1, b=2, metric="m", sessions=[1, 1, 1, 2, 2, 2])
    assert same.unit == "session" and same.n_units == 2 and same.components["sd_between"] == 0
    assert same.scope == "these 2 server starts" and "at least 3 server starts" in same.scope_note
    # Holm keeps the unit's n for the adjusted interval
    adj = holm([r, paired(*_from_logs([0.1, -0.1, 0.05, 0.0]), a=3, b=4, metric="m")])  # neither rejected: 97.5%
    assert adj[0].n_units == 3 and adj[0].ci95[0] < r.ci95[0]
    with pytest.raises(ValueError):
        paired(a, b, a=1, b=2, metric="m", sessions=[1, 2])
