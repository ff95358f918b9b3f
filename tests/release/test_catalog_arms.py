"""releases/README.md's one-line reading of a run with arms: the comparison inside each arm and the interaction,
never the comparison pooled over the arms (which the analysis also holds)."""

from __future__ import annotations

import json
from pathlib import Path

from evidence.release.catalog import reading


def test_a_run_with_arms_is_read_inside_each_arm_and_as_the_interaction(tmp_path: Path) -> None:
    an = tmp_path / "data" / "analysis" / "r1"
    an.mkdir(parents=True)
    within = {"arm": "default", "a": 128, "b": 256, "effect": 0.287, "ci": [0.049, 0.571], "verdict": "finding"}
    ix = {
        "arm_a": "default",
        "arm_b": "chunk512",
        "a": 128,
        "b": 256,
        "effect": 0.423,
        "ci": [0.059, 0.906],
        "ci_level": 0.98333,
        "verdict": "finding",
    }
    pooled = {"a": 128, "b": 256, "effect": 0.076, "ci95": [-0.086, 0.226]}
    (an / "analysis.json").write_text(
        json.dumps({"comparisons": [pooled], "arms": {"within": [within], "interaction": [ix]}})
    )
    text = reading(tmp_path, {"tag": "x-v1", "runs": [{"id": "r1"}]})
    assert text == (
        "r1: in arm default: C128 vs C256 +28.7% (95% CI +4.9% to +57.1%): finding; arm default against "
        "arm chunk512, T_C128/T_C256: +42.3% (98.33% CI +5.9% to +90.6%): finding."
    )
    assert "+7.6%" not in text
