"""Spec -> Plan: the ordered list of trials. Pure and deterministic.

Orders:
- balanced: repeat r (0-based) runs the points rotated left by r (a cyclic
  Latin square). When repeats is a multiple of the point count every point
  takes every position equally often; otherwise each point's count in any
  position differs from any other position's by at most one (the rotation is
  simply cut short), and `Plan.position_counts` shows it.
- fixed: every repeat runs the points in ascending order (the naive sweep).
- shuffled: each repeat is an independent permutation drawn from a
  `random.Random(order_seed)`; reproducible, not balanced.

Prompts are the same for a point in every repeat (seeded by the workload seed and
the point), so repeats of a point differ only by run-to-run noise, and paired
comparisons compare like with like.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass

from evidence.spec.model import Spec


@dataclass(frozen=True)
class Trial:
    index: int  # 0-based position in execution order
    repeat: int  # 1-based
    point: int  # max concurrency
    position: int  # 1-based position of this point within its repeat
    prompts: int
    seed: int  # prompt seed (same for a point across repeats)

    @property
    def id(self) -> str:
        return f"r{self.repeat}-c{self.point}"

    def as_dict(self) -> dict:
        d = asdict(self)
        d["id"] = self.id
        return d


@dataclass(frozen=True)
class Plan:
    order: str
    trials: tuple[Trial, ...]
    note: str

    def as_dict(self) -> dict:
        return {"order": self.order, "note": self.note, "trials": [t.as_dict() for t in self.trials]}

    def position_counts(self) -> dict[int, dict[int, int]]:
        """point -> {position: how many repeats ran it there}."""
        out: dict[int, dict[int, int]] = {}
        for t in self.trials:
            out.setdefault(t.point, {})
            out[t.point][t.position] = out[t.point].get(t.position, 0) + 1
        return out


def point_seed(workload_seed: int, point: int) -> int:
    # Stable across Python versions and hash seeds (no built-in hash()).
    h = hashlib.sha256(f"{workload_seed}:{point}".encode()).digest()
    return int.from_bytes(h[:4], "big")


def repeat_orders(points: list[int], repeats: int, order: str, seed: int | None) -> list[list[int]]:
    n = len(points)
    if order == "fixed":
        return [list(points) for _ in range(repeats)]
    if order == "balanced":
        return [points[r % n:] + points[: r % n] for r in range(repeats)]
    if order == "shuffled":
        rng = random.Random(seed)
        out = []
        for _ in range(repeats):
            p = list(points)
            rng.shuffle(p)
            out.append(p)
        return out
    raise ValueError(f"unknown order {order!r}")


def make_plan(spec: Spec) -> Plan:
    sw = spec.sweep
    orders = repeat_orders(list(sw.points), sw.repeats, sw.order, sw.order_seed)
    trials = []
    for r, pts in enumerate(orders, start=1):
        for pos, p in enumerate(pts, start=1):
            trials.append(Trial(len(trials), r, p, pos, sw.prompts_at(p), point_seed(spec.workload.seed, p)))
    n = len(sw.points)
    if sw.order == "balanced":
        if sw.repeats % n == 0:
            note = f"cyclic Latin square: each of the {n} points runs {sw.repeats // n} time(s) in each position"
        else:
            note = (f"balanced rotation cut short: {sw.repeats} repeats is not a multiple of {n} points, "
                    "so positions are as even as possible (counts differ by at most one)")
    elif sw.order == "fixed":
        note = "fixed ascending order in every repeat: position effects are confounded with the point"
    else:
        note = f"independent seeded shuffles (seed {sw.order_seed}); positions are not balanced"
    return Plan(sw.order, tuple(trials), note)
