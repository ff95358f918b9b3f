"""How each trace analysis reads as text: lines and tables of strings, from the JSON-ready result of
`analyze_trace` (plus "paths", evidence.traces.analyses.geometry.path_totals, where the CLI added it).

The registry (evidence.traces.analyses.registry) carries each analysis's renderer (`<key>_text`); `evidence trace` prints
them in the registry's order (evidence.cli.trace turns the blocks into console lines and tables). A Line's
markup says whether its [bold]...[/] spans are console markup; text from the trace is printed verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Union

__all__ = [
    "Line",
    "Rows",
    "Block",
    "window_text",
    "kernel_active_text",
    "families_text",
    "geometry_text",
    "forwards_text",
    "sustained_text",
    "steps_text",
]


@dataclass(frozen=True)
class Line:
    text: str = ""  # "": an empty line
    markup: bool = True


@dataclass(frozen=True)
class Rows:
    """A table of text: with a title, a header and the console's box; title None: no header, no box."""

    title: str | None
    columns: tuple[str, ...] = ()
    left: frozenset[str] = frozenset()  # the columns justified left (the others right)
    rows: list[tuple[str, ...]] = field(default_factory=list)


Block = Union[Line, Rows]


def _ms(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def _us(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.2f}"


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _num(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:,.2f}"


def _dist(d: dict, fmt: Callable[[Any], str] = _num) -> str:
    if not d or not d.get("n"):
        return "-"
    return f"min {fmt(d['min'])}  p50 {fmt(d['p50'])}  mean {fmt(d['mean'])}  max {fmt(d['max'])}  (n={d['n']})"


def window_text(r: dict[str, Any]) -> list[Block]:
    w = r["window"]
    return [
        Line(),
        Line(
            f"[bold]Kernel-active[/] window {w['start_ns']}..{w['end_ns']} ns ({_ms(w['end_ns'] - w['start_ns'])} ms, {w['source']})"
        ),
    ]


def kernel_active_text(r: dict[str, Any]) -> list[Block]:
    w, ka = r["window"], r["kernel_active"]
    return [
        Line(
            f"  active {_ms(ka['active_ns'])} ms of {_ms(w['end_ns'] - w['start_ns'])} ms = [bold]{_pct(ka['fraction'])}[/]"
            f"   (sum of durations {_ms(ka['sum_kernel_ns'])} ms; overlap across streams {_ms(ka['overlap_ns'])} ms)"
        )
    ]


def families_text(r: dict[str, Any]) -> list[Block]:
    f = r["families"]
    rows = [
        (
            row["family"],
            ", ".join(row["rules"]) if row["family"] != "total" else "",
            f"{row['count']:,}",
            _ms(row["total_ns"]),
            _us(row["mean_ns"]),
            _pct(row["share"]),
            _us(row["per_token_ns"]),
        )
        for row in list(f["families"]) + [f["total"]]
    ]
    out: list[Block] = [
        Line(),
        Rows(
            "Kernel families (first matching rule wins)",
            ("family", "rules", "count", "total ms", "mean us", "share", "us / output token"),
            frozenset({"family", "rules"}),
            rows,
        ),
    ]
    if f["per_token_reason"]:
        out.append(Line(f"  per token: {f['per_token_reason']}", markup=False))
    return out


def geometry_text(r: dict[str, Any]) -> list[Block]:
    out: list[Block] = []
    for g in r["geometry"]:
        groups = g["groups"]
        if g["geometry"][g["select"]] == "opaque":  # nothing to interpret: one line, the groups are in --json
            n = sum(x["count"] for x in groups)
            out += [
                Line(),
                Line(
                    f"[bold]Launch geometry[/]: {g['select']}: {n:,} launches in {len(groups)} grid groups, "
                    "no declared meaning for its grid (all groups are in --json)"
                ),
            ]
            continue
        shown = sorted(groups, key=lambda x: -x["total_ns"])[:12]
        shown_set = {id(x) for x in shown}
        rows = [
            (
                "(" + ", ".join(map(str, x["grid"])) + ")",
                x["replay"],
                f"{x['count']:,}",
                _ms(x["total_ns"]),
                _us(x["mean_ns"]),
                _us(x["per_token_ns"]),
                x["meaning"],
            )
            for x in groups
            if id(x) in shown_set
        ]
        out += [
            Line(),
            Rows(
                f"Launch geometry: {g['select']} ({g['geometry'][g['select']]})",
                ("grid", "replay", "count", "total ms", "mean us", "us / tok", "meaning"),
                frozenset({"grid", "replay", "meaning"}),
                rows,
            ),
        ]
        if len(groups) > len(shown):
            out.append(Line(f"  ... {len(groups) - len(shown)} smaller grid groups not shown (all are in --json)"))
        if g.get("heads"):
            out.append(Line(f"  heads {g['heads']} ({g['heads_source']})"))
    return out + _paths(r.get("paths"))


def _paths(p: dict[str, Any] | None) -> list[Block]:
    """Attention time per path (gridX=1 decode-oriented, gridX>1 mixed/prefill-containing), the seed article's
    table: in the capture window, and in the accepted forwards."""
    if not p:
        return []
    out: list[Block] = []
    for part, title in (("window", "in the capture window"), ("forwards", "in the accepted forwards")):
        rows = p[part]
        out.append(Line())
        if not rows:
            out.append(Line(f"[bold]Attention by path[/] {title}: {p[part + '_absent']}"))
            continue
        cols = (
            ("rule", "path")
            + (("forwards",) if part == "forwards" else ("grid groups",))
            + ("launches", "total ms", "mean us", "us / output token")
        )
        body = [
            (
                str(x["rule"]),
                x["path"],
                f"{x['forwards'] if part == 'forwards' else x['grid_groups']:,}",
                f"{x['launches']:,}",
                _ms(x["total_ns"]),
                _us(x["mean_ns"]),
                _us(x["per_token_ns"]),
            )
            for x in rows
        ]
        out.append(Rows(f"Attention by path {title}", cols, frozenset({"rule", "path"}), body))
    if p["per_token_reason"]:
        out.append(Line(f"  per token: {p['per_token_reason']}", markup=False))
    return out


def forwards_text(r: dict[str, Any]) -> list[Block]:
    fw = r["forwards"]
    out: list[Block] = [Line()]
    if "absent" in fw:
        return out + [Line(f"[bold]Forwards[/]: {fw['absent']}")]
    out.append(
        Line(
            f"[bold]Forwards[/] of {fw['n_layers']} layers from {fw['rule']} launches on device {fw['device']} "
            f"stream {fw['stream']}: {fw['marker_launches']:,} launches, {fw['segments']} segments"
        )
    )
    acc = fw["forwards"]
    by_path: dict[tuple, int] = {}
    for x in acc:
        by_path[(x["path"] or "unknown", x["replay"])] = by_path.get((x["path"] or "unknown", x["replay"]), 0) + 1
    out.append(
        Line(
            f"  accepted {len(acc)} ({', '.join(f'{p}/{rp} {c}' for (p, rp), c in sorted(by_path.items())) or 'none'}); "
            f"split from multiples: {fw['split_segments']} segment(s); rejected {len(fw['rejected'])} segment(s), "
            f"{fw['rejected_launches']} launches {fw['rejected_by_code'] or ''}"
        )
    )
    b = fw["boundaries"]
    out.append(
        Line(
            "  boundaries: "
            + ", ".join(f"{k} {v}" for k, v in b.items())
            + f"; median in-forward gap {_us(fw['median_gap_ns'])} us, gap factor {fw['gap_factor']}"
        )
    )
    if acc:
        checks = sorted({x["sequence_check"] for x in acc})
        srcs = sorted({x["sequences_source"] or "unknown" for x in acc})
        out.append(Line(f"  sequence dimension: {'; '.join(checks)}; sequences from {', '.join(srcs)}"))
    for rej in fw["rejected"][:10]:
        out.append(Line(f"  rejected segment {rej['segment']} [{rej['code']}]: {rej['reason']}", markup=False))
    if len(fw["rejected"]) > 10:
        out.append(Line(f"  ... {len(fw['rejected']) - 10} more rejected segments (all are in --json)"))
    out += [Line(f"  note: {note}", markup=False) for note in fw["notes"]]
    return out


def sustained_text(r: dict[str, Any]) -> list[Block]:
    sus = r["sustained"]
    out: list[Block] = [Line()]
    if "absent" in sus:
        return out + [Line(f"[bold]Sustained regime[/]: {sus['absent']}")]
    for path, s in sus.items():
        if s["present"]:
            out.append(
                Line(
                    f"[bold]Sustained regime[/] ({path} path): {s['forwards']} forwards "
                    f"(#{s['first_forward']}..#{s['last_forward']}, {s['ramp_forwards_before']} before, "
                    f"{s['drain_forwards_after']} after), mean population [bold]{s['mean_sequences']:.2f}[/] "
                    f"({s['min_sequences']}-{s['max_sequences']}), mean attention kernel "
                    f"[bold]{_us(s['mean_kernel_ns'])} us[/] ({_us(s['min_kernel_ns'])}-{_us(s['max_kernel_ns'])})"
                )
            )
        else:
            out.append(Line(f"[bold]Sustained regime[/] ({path} path): none - {s['reason']}"))
    return out


def steps_text(r: dict[str, Any]) -> list[Block]:
    st = r["steps"]
    out: list[Block] = [Line()]
    if "absent" in st:
        return out + [Line(f"[bold]Engine steps[/]: {st['absent']}")]
    out.append(
        Line(
            f"[bold]Engine steps[/]: {st['steps']} ({st['steps_in_window']} in the window, "
            f"{st['steps_partly_outside']} cut by it): {st['steps_with_prefill']} with prefill, "
            f"{st['decode_only_steps']} decode-only"
        )
    )
    rows = [
        ("prefill requests / step", _dist(st["prefill_requests"])),
        ("prefill tokens / step", _dist(st["prefill_tokens"])),
        ("decode population (decode-only)", _dist(st["decode_population_decode_only"])),
        ("decode population (with prefill)", _dist(st["decode_population_with_prefill"])),
        ("tokens (T+G) / step", _dist(st["tokens"])),
    ]
    if st["budget"] is not None:
        rows.append(
            (
                "budget",
                f"{st['budget']}: {st['prefill_steps_at_budget']} prefill steps use it exactly, "
                f"{st['prefill_steps_below_budget']} below, {st['steps_over_budget']} steps over",
            )
        )
    else:
        rows.append(("budget", st["budget_reason"]))
    rows += [
        (
            "kernels",
            f"{st['kernels_placed']:,} placed under a step, {st['kernels_unplaced']:,} outside any "
            f"({_ms(st['unplaced_kernel_ns'])} ms)",
        ),
        ("kernel ms / prefill step", _dist(st["kernel_ns_per_step_prefill"], lambda v: f"{v / 1e6:.3f}")),
        ("kernel ms / decode step", _dist(st["kernel_ns_per_step_decode"], lambda v: f"{v / 1e6:.3f}")),
        ("kernel-active within step", _dist(st["active_fraction_per_step"], lambda v: f"{100 * v:.1f}%")),
    ]
    out.append(Rows(None, rows=rows))
    out += [
        Line(f"  step {b['step']} below budget: N={b['N']} T={b['T']} M={b['M']} G={b['G']} -> {b['tokens']} tokens")
        for b in st["below_budget"][:10]
    ]
    return out
