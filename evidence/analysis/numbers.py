"""The number conventions of analysis.json, and the small arithmetic the tables share.

Floats are rounded to JSON_DECIMALS places (so the last bits of a summation never change the
bytes); relative values are fractions; a value that could not be measured is None, never 0.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

JSON_DECIMALS = 9


def mean_of(xs: Sequence[float]) -> float | None:
    return math.fsum(xs) / len(xs) if xs else None


def std_of(xs: Sequence[float], kind: str) -> float | None:
    n = len(xs)
    if n < 2:
        return None
    m = math.fsum(xs) / n
    ss = math.fsum((x - m) ** 2 for x in xs)
    return math.sqrt(ss / (n if kind == "population" else n - 1))


def median_of(xs: Sequence[float]) -> float | None:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return None
    return float(s[n // 2]) if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def as_num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def rel_of(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def round_floats(obj: Any) -> Any:
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        v = round(obj, JSON_DECIMALS)
        return 0.0 if v == 0 else v
    if isinstance(obj, dict):
        return {k: round_floats(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [round_floats(v) for v in obj]
    return obj


def pct_text(x: float | None, decimals: int = 3, signed: bool = False) -> str:
    """A fraction as percent text, e.g. 0.04664 -> '4.664%' (signed: '+4.664%'); None -> 'n/a'."""
    if x is None:
        return "n/a"
    v = x * 100
    if round(v, decimals) == 0:
        v = 0.0
        signed = False
    return (f"{v:+.{decimals}f}%" if signed else f"{v:.{decimals}f}%")


def interval_text(ci: Sequence[float | None]) -> str:
    """A relative interval as '-5.9% to +34.2%' (signed percent, one decimal), the form every verdict uses."""
    return f"{pct_text(ci[0], 1, signed=True)} to {pct_text(ci[1], 1, signed=True)}"


def label(point: int) -> str:
    return f"C{point}"
