"""The design a spec gets for what it does not give: how many repeats and server starts.

Kept apart from the models (evidence.spec.model) because it reads the raw mapping before
validation, and the stored resolved specs of older runs through it.
"""

from __future__ import annotations

import json
from typing import Any

MAX_SESSIONS = 64  # server starts in one run
DEFAULT_STARTS = 3  # a claim about the configuration needs 3 server starts (evidence.spec.plan.CLAIM_MIN_STARTS)


def _count(v: Any) -> int | None:
    return v if type(v) is int and v >= 1 else None


def default_design(data: Any) -> Any:
    """The raw spec mapping with the sweep.repeats and sweep.sessions it does not give (design_fill)."""
    fill = design_fill(data)
    return {**data, "sweep": {**data["sweep"], **fill}} if fill else data


def design_fill(data: Any) -> dict[str, int]:
    """The sweep.repeats and sweep.sessions a spec gets for the ones it does not give (raw mapping in).

    A spec that does not say gets a design whose verdicts can speak for the configuration, not
    for one server start: one repeat per server start (at the H200's variance components the
    cheapest design for a given power unless a start costs more than about 12 repeats,
    bench/RESULTS-sessions.md), 3 starts when nothing is given, 3 blocks of one start per arm
    with arms. An endpoint keeps 1 start: this tool cannot
    restart someone else's server. Values given are never changed; a value that is not a count
    is left to validation to refuse."""
    sw = data.get("sweep") if isinstance(data, dict) else None
    if not isinstance(sw, dict) or ("sessions" in sw and "repeats" in sw):
        return {}
    eng = data.get("engine")
    endpoint = isinstance(eng, dict) and (eng.get("base_url") is not None or eng.get("kind") == "endpoint")
    arms = data.get("arms")
    m = len(arms) if isinstance(arms, list) and len(arms) >= 2 else 0
    if "sessions" in sw:  # starts given, repeats not: one repeat per start; one start gets 3 (an interval)
        k = _count(sw["sessions"])
        return {"repeats": k if k >= 2 else DEFAULT_STARTS} if k else {}
    if "repeats" in sw:
        r = _count(sw["repeats"])
        if r is None:
            return {}
        if endpoint:
            return {"sessions": 1}
        if m:  # one repeat per start in whole blocks of one start per arm; else the arms check explains
            return {"sessions": r} if r % m == 0 and 2 * m <= r <= MAX_SESSIONS else {}
        return {"sessions": min(r, MAX_SESSIONS)}
    if endpoint:
        return {"repeats": DEFAULT_STARTS, "sessions": 1}
    n = DEFAULT_STARTS * (m or 1)
    return {"repeats": n, "sessions": n}


def legacy_design(text: str) -> str:
    """A resolved spec (JSON) stored before sweep.sessions existed ran one server start: it keeps that design,
    never today's default. Text that is not such a spec is returned as it is, for validation to refuse."""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict) and isinstance(data.get("sweep"), dict) and "sessions" not in data["sweep"]:
        return json.dumps({**data, "sweep": {**data["sweep"], "sessions": 1}})
    return text
