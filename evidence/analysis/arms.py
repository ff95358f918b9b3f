"""Arms (spec.arms): named variants of the engine compared start by start, point by point.

Each server start runs one arm; the starts come in blocks of one start per arm (evidence.spec.plan). At every
point, arm a against arm b is a paired comparison whose unit is the block: its value is ln(T_a / T_b), each arm
valued by the mean of ln(output throughput) over its start's repeats at that point. The test is the stated
procedure of evidence.analysis.stats (t over the blocks, blocks - 1 df), Holm over the points of one pair of
arms, with the equivalence margin of analysis.comparisons (the first declared margin) when there is one. The
scope is "these N blocks of server starts"; a claim about the arms needs at least 3 blocks.

With declared comparisons of points (analysis.comparisons), two more families: each comparison inside each arm
(the arm's server starts are the unit: a spec with arms never pools them), and the interaction, whether two arms
differ in how the two points compare (per block, the quotient of the arms' T_a / T_b ratios).
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


WITHIN_METHOD = (
    "per arm and declared comparison: the unit is a server start of that arm; its value ln(T_a / T_b), each point "
    "valued by the mean ln(output throughput) over the start's repeats; paired t over the arm's starts (starts - 1 "
    "df), Holm over the declared comparisons of the arm; with the comparison's margin, two one-sided tests"
)
INTERACTION_METHOD = (
    "per pair of arms and declared comparison: the unit is a block of server starts; its value "
    "ln((T_a / T_b in one arm) / (T_a / T_b in the other)); t over the blocks (blocks - 1 df), Holm over every pair "
    "of arms and declared comparison"
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
            va, vb, used = _block_pairs(logs, blocks, (P, a), (P, b))
            tests.append(
                _paired(
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
            out.append(
                {
                    "a": a,
                    "b": b,
                    "point": P,
                    "blocks": [blk + 1 for blk in used],
                    "a_values": va,
                    "b_values": vb,
                    **_result(r),
                    "statement": _statement(r, a, b, P, len(tests)),
                }
            )
    res = {"arms": names, "blocks": len(blocks), "margin": margin, "method": METHOD, "comparisons": out}
    pairs = [(c.a, c.b, c.margin) for c in spec.analysis.comparisons]
    if pairs:
        res["within"] = _within(logs, names, blocks, m, pairs)
        res["interaction"] = _interaction(logs, names, blocks, pairs)
        res["within_method"], res["interaction_method"] = WITHIN_METHOD, INTERACTION_METHOD
        if data.looks:  # the loop's looks decided the pairs of arms only: say what these fixed-sample tests are
            res["within_note"] = (
                "the blocks after the planned ones were added by --until-decided, whose looks tested the pairs of "
                "arms only; the tests inside each arm and of the interaction are fixed-sample tests at the final "
                "number of blocks, a number the looks' stopping rule chose without them"
            )
    return res


def _paired(*args: Any, **kw: Any) -> Any:
    """stats.paired without numpy's RuntimeWarnings: a family with a single unit has no spread, and the result says
    so itself ("no claim")."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return paired(*args, **kw)


def _result(r) -> dict[str, Any]:
    """The keys of one test that every arm verdict carries (effect, interval at its Holm level, unit, scope)."""
    return {
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
    }


def _start_mean(logs: dict, point: int, block: int, arm: str) -> float | None:
    v = logs.get((point, block, arm))
    return math.exp(sum(v) / len(v)) if v else None


def _block_pairs(
    logs: dict, blocks: list[int], cell_a: tuple[int, str], cell_b: tuple[int, str]
) -> tuple[list[float], list[float], list[int]]:
    """Per block where both cells (point, arm) were measured: each cell's start mean, and the blocks used."""
    va, vb, used = [], [], []
    for blk in blocks:
        xa, xb = _start_mean(logs, cell_a[0], blk, cell_a[1]), _start_mean(logs, cell_b[0], blk, cell_b[1])
        if xa is not None and xb is not None:
            va.append(xa)
            vb.append(xb)
            used.append(blk)
    return va, vb, used


def _within(logs: dict, names: list[str], blocks: list[int], m: int, pairs: list) -> list[dict[str, Any]]:
    """The declared comparisons of points inside each arm: the arm's own server starts are the unit (a start is
    valued by the geometric mean of its repeats at each point), Holm over the declared comparisons of the arm."""
    out = []
    for arm in names:
        tests, meta = [], []
        for a, b, margin in pairs:
            va, vb, used = _block_pairs(logs, blocks, (a, arm), (b, arm))
            starts = [blk * m + names.index(arm) + 1 for blk in used]  # a label per start (the block and the arm)
            tests.append(
                _paired(
                    va,
                    vb,
                    a=a,
                    b=b,
                    metric=f"output_throughput in arm {arm}",
                    alpha=ALPHA,
                    sessions=starts,
                    margin=margin,
                )
            )
            meta.append((a, b, va, vb))
        for (a, b, va, vb), r in zip(meta, holm(tests)):
            out.append(
                {
                    "arm": arm,
                    "a": a,
                    "b": b,
                    "a_values": va,
                    "b_values": vb,
                    **_result(r),
                    "statement": _point_statement(r, arm, a, b, len(tests)),
                }
            )
    return out


def _interaction(logs: dict, names: list[str], blocks: list[int], pairs: list) -> list[dict[str, Any]]:
    """Does an arm change a declared comparison? Per block, the ratio T_a / T_b of the points in one arm against
    the same ratio in the other arm: ln of their quotient, t over the blocks, Holm over the pairs of arms and
    the declared comparisons. A finding says the arms differ in how the two points compare (the knee moves)."""
    tests, meta = [], []
    for x, y in combinations(names, 2):
        for a, b, _ in pairs:
            rx, ry, used = [], [], []
            for blk in blocks:
                v = [_start_mean(logs, p, blk, arm) for arm in (x, y) for p in (a, b)]
                if all(u is not None for u in v):
                    rx.append(v[0] / v[1])  # type: ignore[operator]
                    ry.append(v[2] / v[3])  # type: ignore[operator]
                    used.append(blk + 1)
            tests.append(_paired(rx, ry, a=x, b=y, metric=f"T_{a}/T_{b}", alpha=ALPHA, unit="block"))
            meta.append((x, y, a, b, used, rx, ry))
    out = []
    for (x, y, a, b, used, rx, ry), r in zip(meta, holm(tests)):
        out.append(
            {
                "arm_a": x,
                "arm_b": y,
                "a": a,
                "b": b,
                "blocks": used,
                "ratio_a": rx,
                "ratio_b": ry,
                **_result(r),
                "statement": _interaction_statement(r, x, y, a, b, len(tests)),
            }
        )
    return out


def _p_body(r, family: int, what: str) -> str:
    return (
        f"{pct_text(r.effect, 1, signed=True)} ({ci_text(r)}; p {p_text(r.p_value)}"
        + (f"; Holm over {family} {what}: adjusted p {p_text(r.p_adjusted)}" if family > 1 else "")
        + ")"
    )


def _point_statement(r, arm: str, a: int, b: int, family: int) -> str:
    head = f"{label(a)} vs {label(b)} in arm {arm}"
    if r.verdict == "no claim":
        return f"no claim: {head} has {r.n_units} server start(s); an interval needs at least 2; {scope_text(r)}"
    body = _p_body(r, family, "comparisons")
    if r.verdict == "finding":
        return f"finding: {label(r.better)} is faster, {head} {body}; {scope_text(r)}"
    if r.verdict == "equivalent":
        return (
            f"equivalent: {head} within +-{pct_text(r.margin, 1)} {body}; two one-sided tests p "
            f"{p_text(r.tost_p)}; {scope_text(r)}"
        )
    return f"not significant: {head} {body}; smallest effect found with 80% power {pct_text(r.mde, 1)}; {scope_text(r)}"


def _interaction_statement(r, x: str, y: str, a: int, b: int, family: int) -> str:
    head = f"T_{label(a)} / T_{label(b)} in arm {x} against arm {y}"
    if r.verdict == "no claim":
        return f"no claim: {head} has {r.n_units} block(s); an interval needs at least 2; {scope_text(r)}"
    body = _p_body(r, family, "tests")
    if r.verdict == "finding":
        return f"finding: the arms change how {label(a)} compares with {label(b)}, {head} {body}; {scope_text(r)}"
    return f"not significant: {head} {body}; smallest effect found with 80% power {pct_text(r.mde, 1)}; {scope_text(r)}"


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
