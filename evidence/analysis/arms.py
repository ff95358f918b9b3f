"""Arms (spec.arms): named variants of the engine compared start by start, point by point.

Each server start runs one arm; the starts come in blocks of one start per arm (evidence.spec.plan). At every
point, arm a against arm b is a paired comparison whose unit is the block: its value is ln(T_a / T_b), each arm
valued by the mean of ln(output throughput) over its start's repeats at that point. The test is the stated
procedure of evidence.analysis.stats (t over the blocks, blocks - 1 df), Holm over the points of one pair of
arms, with the equivalence margin of analysis.comparisons (the first declared margin) when there is one. The
scope is "these N blocks of server starts"; a claim about the arms needs at least 3 blocks.
"""

from __future__ import annotations

import math
import warnings
from itertools import combinations
from typing import Any

from evidence.analysis.findings import ALPHA, ci_text, p_text, scope_text
from evidence.analysis.load import RunData
from evidence.analysis.numbers import label, pct_text
from evidence.analysis.stats import holm, paired

METHOD = (
    "per point and pair of arms: the unit is a block of server starts (one start per arm); its value "
    "ln(T_a / T_b), each arm valued by the mean ln(output throughput) over its start's repeats at the point; "
    "paired t over the blocks (blocks - 1 df), Holm over the points of each pair of arms; with a declared "
    "margin (the first analysis.comparisons margin), two one-sided tests: 'equivalent'"
)


def arm_comparisons(data: RunData, rows: dict[str, dict]) -> dict[str, Any] | None:
    spec = data.spec
    names = [a.name for a in getattr(spec, "arms", [])]
    if not names:
        return None
    m = len(names)
    margin = next((c.margin for c in spec.analysis.comparisons if getattr(c, "margin", None)), None)
    # (point, block, arm) -> ln values of that start's repeats
    logs: dict[tuple[int, int, str], list[float]] = {}
    for t in data.trials:
        v = rows[t.id]["output_throughput"] if t.present else None
        if t.arm is None or not isinstance(v, (int, float)) or v <= 0:
            continue
        logs.setdefault((t.point, (t.session - 1) // m, t.arm), []).append(math.log(v))
    blocks = sorted({b for _, b, _ in logs})
    out = []
    for a, b in combinations(names, 2):
        tests, per_point = [], []
        for P in spec.sweep.points:
            va, vb, used = [], [], []
            for blk in blocks:
                la, lb = logs.get((P, blk, a)), logs.get((P, blk, b))
                if la and lb:
                    va.append(math.exp(sum(la) / len(la)))
                    vb.append(math.exp(sum(lb) / len(lb)))
                    used.append(blk + 1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                tests.append(
                    paired(
                        va,
                        vb,
                        a=a,
                        b=b,
                        metric=f"output_throughput at {label(P)}",
                        alpha=ALPHA,
                        unit="block",
                        margin=margin,
                    )
                )
            per_point.append((P, used, va, vb))
        adjusted = holm(tests)
        for (P, used, va, vb), r in zip(per_point, adjusted):
            text = _statement(r, a, b, P, len(tests))
            out.append(
                {
                    "a": a,
                    "b": b,
                    "point": P,
                    "blocks": used,
                    "a_values": va,
                    "b_values": vb,
                    "verdict": r.verdict,
                    "effect": r.effect,
                    "ratio_effect": r.ratio_effect,
                    "ci": list(r.ci95) if r.ci95 else None,
                    "ci_level": r.ci_level if r.ci95 else None,
                    "p_value": r.p_value,
                    "p_adjusted": r.p_adjusted,
                    "mde": r.mde,
                    "margin": r.margin,
                    "tost_p": r.tost_p,
                    "equivalent": r.equivalent,
                    "unit": r.unit,
                    "n_units": r.n_units,
                    "df": r.df,
                    "scope": r.scope,
                    "scope_note": r.scope_note,
                    "better": r.better,
                    "test": r.test,
                    "statement": text,
                }
            )
    return {"arms": names, "blocks": len(blocks), "margin": margin, "method": METHOD, "comparisons": out}


def _statement(r, a: str, b: str, point: int, family: int) -> str:
    head = f"arm {a} vs arm {b} at {label(point)}"
    if r.verdict == "no claim":
        return f"no claim: {head} has {r.n_units} block(s); an interval needs at least 2; {scope_text(r)}"
    body = (
        f"{pct_text(r.effect, 1, signed=True)} ({ci_text(r)}; p {p_text(r.p_value)}"
        + (f"; Holm over {family} points: adjusted p {p_text(r.p_adjusted)}" if family > 1 else "")
        + ")"
    )
    if r.verdict == "finding":
        return f"finding: arm {r.better} is faster, {head} {body}; {scope_text(r)}"
    if r.verdict == "equivalent":
        return (
            f"equivalent: {head} within +-{pct_text(r.margin, 1)} {body}; two one-sided tests p "
            f"{p_text(r.tost_p)}; {scope_text(r)}"
        )
    return f"not significant: {head} {body}; smallest effect found with 80% power {pct_text(r.mde, 1)}; {scope_text(r)}"
