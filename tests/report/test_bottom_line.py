"""The report's title line (issue 25): the first declared comparison's verdict with its interval and scope, or
"Not decided" honestly, in one short line."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rundir_fixtures import build_run, demo_spec  # noqa: E402

from evidence.analysis.analyze import compute_analysis  # noqa: E402
from evidence.analysis.load import load_run  # noqa: E402
from evidence.report.layout import bottom_line, bottom_line_more  # noqa: E402


def _res(verdict: str, **c) -> dict:
    comp = {
        "name": "C4 vs C16",
        "a": 4,
        "b": 16,
        "verdict": verdict,
        "effect": 0.071,
        "ci95": [0.02, 0.125],
        "scope": "these 3 server starts",
        "df": 2,
        "n_units": 3,
        "family": 1,
        **c,
    }
    return {
        "completeness": {"run_status": "complete", "missing": [], "with_failures": []},
        "comparisons": [comp],
        "points": [],
    }


def test_a_finding_states_its_direction_interval_and_scope() -> None:
    assert bottom_line(_res("finding")) == (
        "C4 beats C16 by 7.1% in throughput (95% CI +2.0% to +12.5%; these 3 server starts)."
    )
    line = bottom_line(_res("finding", effect=-0.2, ci95=[-0.3, -0.1]))
    assert line.startswith("C4 trails C16 by 20.0% in throughput (95% CI -30.0% to -10.0%")


def test_equivalence_and_undecided_are_said_plainly() -> None:
    eq = bottom_line(_res("equivalent", effect=0.01, ci95=[-0.03, 0.04], margin=0.05))
    assert eq == "C4 and C16 equivalent within ±5.0% in throughput (95% CI -3.0% to +4.0%; these 3 server starts)."
    ns = bottom_line(_res("not significant", effect=0.03, ci95=[-0.02, 0.08]))
    assert ns == "Not decided: C4 vs C16 throughput +3.0% (95% CI -2.0% to +8.0%; these 3 server starts)."
    one = bottom_line(_res("no claim", n_units=1, ci95=None))
    assert one.startswith("Not decided: C4 vs C16 has 1 unit(s)")


def test_a_holm_family_gives_the_interval_at_its_level() -> None:
    r = _res("finding", family=2, ci_adjusted=[0.01, 0.14], ci_adjusted_level=0.975)
    assert "(97.5% CI +1.0% to +14.0%;" in bottom_line(r)


def test_real_runs(tmp_path: Path) -> None:
    one = compute_analysis(load_run(build_run(tmp_path, run_id="one")))  # C4 vs C16, one server start
    assert bottom_line(one).startswith("C4 beats C16 by ") and bottom_line(one).endswith("this server start).")
    assert bottom_line_more(one) == ""
    cut = compute_analysis(load_run(build_run(tmp_path, run_id="cut", missing=("r3-c16",))))
    assert bottom_line(cut).startswith("Incomplete run. ")
    none = compute_analysis(load_run(build_run(tmp_path, run_id="none", spec=demo_spec(comparisons=[]))))
    assert bottom_line(none).startswith(
        "Not decided: the spec declares no comparison; highest mean output throughput at C4 ("
    )
    two = compute_analysis(load_run(build_run(tmp_path, run_id="two", spec=demo_spec(comparisons=[(4, 16), (1, 4)]))))
    assert "first of 2 declared comparisons" in bottom_line_more(two)


def _arm_test(verdict: str, effect: float, ci: list[float], **k) -> dict:
    return {"verdict": verdict, "effect": effect, "ci": ci, "ci_level": 0.95, "a": 128, "b": 256, **k}


def test_with_arms_the_line_is_the_interaction_and_the_arms_are_never_pooled() -> None:
    res = _res("not significant")  # the pooled comparison over both arms: never the title of a run with arms
    res["arms"] = {
        "interaction": [
            _arm_test(
                "finding",
                0.423,
                [0.059, 0.906],
                arm_a="default",
                arm_b="chunk512",
                scope="these 3 blocks of server starts",
                ci_level=0.9833,
            ),
        ],
        "within": [
            _arm_test("finding", 0.287, [0.049, 0.571], arm="default", scope="these 3 server starts"),
            _arm_test("not significant", 0.037, [-0.391, 0.717], arm="a100", scope="these 3 server starts"),
        ],
    }
    assert bottom_line(res) == (
        "The arms change the knee: C128/C256 throughput, arm default against arm chunk512 +42.3% "
        "(98.33% CI +5.9% to +90.6%; these 3 blocks of server starts)."
    )
    assert bottom_line_more(res) == (
        "Inside each arm: arm default: C128 beats C256 by 28.7% (95% CI +4.9% to +57.1%; these 3 server starts); "
        "arm a100: not decided, C128 vs C256 +3.7% (95% CI -39.1% to +71.7%; these 3 server starts)."
    )
    res["arms"]["interaction"][0]["verdict"] = "not significant"
    assert bottom_line(res).startswith("Not decided: C128/C256 throughput, arm default against arm chunk512 +42.3%")


def test_with_arms_the_headline_reads_inside_each_arm_and_leaves_the_pooled_verdicts_to_all_caveats() -> None:
    from evidence.report.layout import headline

    res = _res("not significant")
    res["completeness"].update(trials_present=4, trials_planned=4)
    res["comparisons"][0]["statement"] = "not significant: C4 vs C16 pooled over the arms"
    res["points"] = [{"label": "C4", "output_throughput": {"mean": 100.0, "cv": 0.01}, "repeats_measured": 2}]
    res["ordering"], res["dominance"] = {}, {"pairs": []}
    res["arms"] = {
        "within": [{"statement": "finding: C4 is faster, C4 vs C16 in arm a"}],
        "interaction": [{"statement": "finding: the arms change how C4 compares with C16"}],
    }
    res["caveats"] = ["Not significant: C4 vs C16 pooled.", "Dummy weights."]
    res["caveat_kinds"] = [
        {"kind": "comparison_verdict", "about": "C4 vs C16", "short": None},
        {"kind": "dummy_weights", "about": None, "short": None},
    ]
    h = headline(res)
    assert h["verdicts"][1:] == [
        "Finding: C4 is faster, C4 vs C16 in arm a.",
        "Finding: the arms change how C4 compares with C16.",
    ]
    assert [c["short"] for c in h["caveat_items"]] == ["Dummy weights."]  # the pooled verdict: in All caveats only
    assert h["caveats_all"] == res["caveats"]


def test_with_arms_and_no_interaction_the_line_is_a_decided_pair_of_arms() -> None:
    res = _res("not significant")
    res["arms"] = {
        "interaction": [
            _arm_test("not significant", -0.002, [-0.009, 0.004], arm_a="fast", arm_b="slow", scope="these 3 blocks")
        ],
        "comparisons": [
            {"a": "fast", "b": "slow", "point": 1, "verdict": "not significant", "effect": 0.01, "ci": [-0.1, 0.1]},
            {
                "a": "fast",
                "b": "slow",
                "point": 4,
                "verdict": "finding",
                "effect": -0.25,
                "ci": [-0.3, -0.2],
                "ci_level": 0.975,
                "scope": "these 3 blocks of server starts",
            },
        ],
    }
    assert bottom_line(res) == (
        "Arm slow beats arm fast at C4 by 25.0% in throughput (97.5% CI -30.0% to -20.0%; these 3 blocks of server "
        "starts)."
    )
