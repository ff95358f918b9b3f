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

Sessions (`sweep.sessions` K > 1: the engine is restarted between blocks of repeats): the
repeats are cut, in order, into K consecutive blocks whose sizes differ by at most one (the
larger blocks first), and each trial carries its 1-based `session`. The rotation keeps running
across blocks, so with the balanced order each block holds consecutive rotations of the Latin
square (within a block a point's counts in any two positions differ by at most one) and the
whole run is the same Latin square as without sessions. The plan JSON carries `session` (and
`sessions`) only when K > 1, so plans without sessions keep their bytes.

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
    session: int | None = None  # 1-based engine session; None when the sweep has one session
    arm: str | None = None  # the arm (spec.arms) this trial's server start runs; None without arms

    @property
    def id(self) -> str:
        return f"r{self.repeat}-c{self.point}"

    def as_dict(self) -> dict:
        d = asdict(self)
        if self.session is None:
            del d["session"]  # plans without sessions keep their bytes
        if self.arm is None:
            del d["arm"]  # plans without arms keep their bytes
        d["id"] = self.id
        return d


@dataclass(frozen=True)
class Plan:
    order: str
    trials: tuple[Trial, ...]
    note: str

    def as_dict(self) -> dict:
        d = {"order": self.order, "note": self.note, "trials": [t.as_dict() for t in self.trials]}
        if self.sessions > 1:
            d["sessions"] = self.sessions
        return d

    @property
    def sessions(self) -> int:
        return max((t.session or 1 for t in self.trials), default=1)

    def session_repeats(self) -> dict[int, list[int]]:
        """session -> its repeats, in order."""
        out: dict[int, list[int]] = {}
        for t in self.trials:
            reps = out.setdefault(t.session or 1, [])
            if t.repeat not in reps:
                reps.append(t.repeat)
        return out

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


def session_of(repeats: int, sessions: int) -> list[int]:
    """The 1-based session of each repeat: consecutive blocks whose sizes differ by at most one."""
    if not 1 <= sessions <= repeats:
        raise ValueError(f"sessions must be 1..{repeats} (the repeats), not {sessions}")
    base, extra = divmod(repeats, sessions)
    out: list[int] = []
    for s in range(1, sessions + 1):
        out += [s] * (base + (1 if s <= extra else 0))
    return out


def arm_of_session(session: int, arms: list[str]) -> str:
    """The arm a 1-based server start runs: starts come in blocks of one start per arm, and each block runs the
    arms in the next rotation of their order (block b starts with arm b mod m), so each arm takes each place in
    a block equally often over every m blocks: the order of starts is balanced, not confounded with the arm."""
    m = len(arms)
    block, place = divmod(session - 1, m)
    return arms[(place + block) % m]


def spec_for_arm(spec: Spec, arm: str) -> Spec:
    """The spec with its engine section as `arm` sets it (env added, args replaced field by field, launch and
    version replaced when the arm gives them: another build)."""
    from evidence.spec.model import EngineArgs

    a = next(x for x in getattr(spec, "arms", []) if x.name == arm)
    args = EngineArgs.model_validate({**spec.engine.args.model_dump(), **a.args})
    build = {k: v for k, v in (("launch", a.launch), ("version", a.version)) if v is not None}
    engine = spec.engine.model_copy(update={"env": {**spec.engine.env, **a.env}, "args": args, **build})
    return spec.model_copy(update={"engine": engine})


def make_plan(spec: Spec) -> Plan:
    sw = spec.sweep
    orders = repeat_orders(list(sw.points), sw.repeats, sw.order, sw.order_seed)
    sessions = int(getattr(sw, "sessions", 1) or 1)
    sess = session_of(sw.repeats, sessions) if sessions > 1 else [None] * sw.repeats
    arm_names = [a.name for a in getattr(spec, "arms", [])]
    trials = []
    for r, pts in enumerate(orders, start=1):
        for pos, p in enumerate(pts, start=1):
            trials.append(Trial(len(trials), r, p, pos, sw.prompts_at(p), point_seed(spec.workload.seed, p),
                                sess[r - 1], arm_of_session(sess[r - 1], arm_names) if arm_names else None))
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
    if sessions > 1:
        sizes = sorted({sess.count(s) for s in range(1, sessions + 1)}, reverse=True)
        note += (f"; {sessions} engine sessions of {' or '.join(map(str, sizes))} consecutive repeat(s) each"
                 + (", each block consecutive rotations of the square" if sw.order == "balanced" else ""))
    if arm_names:
        note += (f"; arms {', '.join(arm_names)}: one per server start, in blocks of {len(arm_names)} consecutive "
                 "starts, the arms' order rotated from block to block")
    return Plan(sw.order, tuple(trials), note)


CLAIM_MIN_STARTS = 3  # as evidence.analysis.stats: a claim about the configuration needs this many server starts


def design_claim(spec: Spec) -> dict:
    """What the spec's design can claim before it runs: the unit of every test, its n and df, and the scope.

    The unit is fixed by the design (evidence.analysis.stats): 2 or more server starts (sweep.sessions) make the
    start the unit; one start leaves the repeat, and every verdict is about that server start. With arms the
    points are compared inside each arm, over that arm's starts (never pooled over the arms)."""
    arms = [a.name for a in getattr(spec, "arms", [])]
    total = int(getattr(spec.sweep, "sessions", 1) or 1)
    k = total // len(arms) if arms else total  # the starts a comparison of points is made over
    reps = spec.sweep.repeats // len(arms) if arms else spec.sweep.repeats
    need = CLAIM_MIN_STARTS * (len(arms) or 1)  # 3 starts of every arm
    unit = "session" if k >= 2 else "repeat"
    n = k if k >= 2 else reps
    scope = "this server start" if k == 1 else f"these {k} server starts" + (" of each arm" if arms else "")
    if k == 1:
        note = (f"one server start: every verdict is about that start only (the variance between starts is not "
                f"measured); set sweep.sessions to {need} or more for a claim about the configuration")
    elif k < CLAIM_MIN_STARTS:
        note = (f"{k} server starts: the test has {k - 1} df and its verdicts are about these starts; a claim about "
                f"the configuration needs sweep.sessions >= {need}")
    else:
        note = None
    if not spec.engine.starts_server:
        # an endpoint's server is someone else's: its sessions are blocks of one server, never a restart
        note = ("the endpoint's server is started elsewhere and never restarted by this tool, so its variance between "
                "starts is not measured: verdicts are about that server as it ran; a claim about the configuration "
                f"needs {CLAIM_MIN_STARTS} or more runs, each against a freshly started server")
    words = "server starts" if unit == "session" else "repeats of one server start"
    out = {"server_starts": total, "repeats": spec.sweep.repeats, "unit": unit, "n": n, "df": n - 1 if n >= 2 else None,
           "scope": scope, "claim_note": note,
           "text": (f"verdicts over {n} {words} ({n - 1} df); scope: {scope}" if n >= 2 else
                    f"{n} unit: no interval, no verdict (no claim)") + (f"; {note}" if note else "")}
    if arms:
        blocks = total // len(arms)
        out["arms"] = {"arms": arms, "unit": "block", "n": blocks, "df": blocks - 1,
                       "scope": f"these {blocks} blocks of server starts"}
        out["text"] += (f"; arms {' vs '.join(arms)}: over {blocks} blocks of server starts ({blocks - 1} df)"
                        + (f", a claim about the arms needs at least {CLAIM_MIN_STARTS} blocks"
                           if blocks < CLAIM_MIN_STARTS else ""))
    return out
