"""releases/README.md: every release, its one-line reading, its status (current, or superseded by which) and
how to verify it, generated from the committed release folders alone (release.json, data/analysis,
data/release/notes.md). The same folders give the same bytes; a frozen release is only read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evidence.canon import write_atomic
from evidence.release.archive import published_sha256
from evidence.release.chain import NOTES_PATH, current_of, release_folders, small_file, superseded_by
from evidence.release.layout import PAYLOAD_DIR, RELEASE_DIR, RELEASE_JSON, ReleaseError, dig

CATALOG = "README.md"


def _json(p: Path) -> Any:
    b = small_file(p)  # a folder here may be hostile: never read whole when larger than any file freeze writes
    try:
        return json.loads(b) if b is not None else None
    except (ValueError, RecursionError):
        return None


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def verdict_line(c: dict) -> str:
    """One declared comparison as its analysis states it: the interval procedure (effect, ci95) or, in analyses
    made before it, the verdict text and its kind."""
    name = c.get("name") or f"C{c.get('a')} vs C{c.get('b')}"
    ci = c.get("ci95")
    if (
        isinstance(c.get("effect"), (int, float))
        and isinstance(ci, list)
        and len(ci) == 2
        and all(isinstance(v, (int, float)) for v in ci)
    ):
        kind = f"finding, C{c['better']} ahead" if c.get("better") is not None else "not significant"
        return f"{name} {_pct(c['effect'])} (95% CI {_pct(ci[0])} to {_pct(ci[1])}): {kind}"
    if isinstance(c.get("verdict"), str):
        kind = str(c.get("verdict_kind") or "").replace("_", " ")
        return f"{name}: {c['verdict']}" + (f" ({kind})" if kind and kind not in c["verdict"] else "")
    return f"{name}: no verdict recorded"


def arm_line(c: dict) -> str:
    """One verdict of an analysis' arms section (inside an arm, or an interaction): effect, interval at its level."""
    ci, lvl = c.get("ci"), c.get("ci_level") or 0.95
    if (
        isinstance(c.get("effect"), (int, float))
        and isinstance(ci, list)
        and len(ci) == 2
        and all(isinstance(v, (int, float)) for v in ci)
    ):
        name = f"C{c['a']} vs C{c['b']} " if "arm" in c else ""
        return f"{name}{_pct(c['effect'])} ({lvl * 100:.4g}% CI {_pct(ci[0])} to {_pct(ci[1])}): {c.get('verdict')}"
    return f"{c.get('verdict') or 'no verdict recorded'}"


def reading(folder: Path, meta: dict) -> str:
    """The release's one-line reading: the title of its notes, if any, then each run's declared comparisons
    as its own analysis states them."""
    parts = []
    notes = (small_file(folder / NOTES_PATH) or b"").decode("utf-8", "replace")
    title = next((ln[2:].strip() for ln in notes.splitlines() if ln.startswith("# ")), "")
    tag = meta.get("tag", folder.name)
    if title.startswith(f"{tag}:"):
        title = title[len(tag) + 1 :].strip()
    if title:
        parts.append(title[:1].upper() + title[1:] + ".")
    runs = sorted(r["id"] for r in meta.get("runs", []) if isinstance(r, dict) and isinstance(r.get("id"), str))
    for rid in runs:
        a = _json(folder / PAYLOAD_DIR / "analysis" / rid / "analysis.json")
        comps = a.get("comparisons") if isinstance(a, dict) else None
        arms = a.get("arms") if isinstance(a, dict) else None
        if isinstance(arms, dict) and isinstance(arms.get("within"), list) and arms["within"]:
            # with arms the comparisons are read inside each arm and as the interaction, never pooled
            lines = [f"in arm {w.get('arm')}: " + arm_line(w) for w in arms["within"] if isinstance(w, dict)]
            lines += [
                f"arm {x.get('arm_a')} against arm {x.get('arm_b')}, T_C{x.get('a')}/T_C{x.get('b')}: " + arm_line(x)
                for x in arms.get("interaction") or []
                if isinstance(x, dict)
            ]
            parts.append(f"{rid}: " + "; ".join(lines) + ".")
        elif isinstance(comps, list) and comps:
            parts.append(f"{rid}: " + "; ".join(verdict_line(c) for c in comps if isinstance(c, dict)) + ".")
        else:
            parts.append(f"{rid}: no declared comparison.")
    return " ".join(parts)


def render_catalog(releases: Path) -> str:
    releases = Path(releases)
    folders = release_folders(releases)
    if not folders:
        raise ReleaseError(f"{releases} holds no release folder (a folder with {RELEASE_JSON}); nothing to index.")
    sup = superseded_by(releases)
    metas = {t: (_json(f / RELEASE_JSON) or {}) for t, f in folders.items()}
    order = sorted(folders, key=lambda t: (-int(dig(metas[t], "freeze", "source_date_epoch") or 0), t))

    def status(t: str) -> str:
        if t not in sup:
            return "current"
        by = ", ".join(f"{n['tag']} ({n['how']})" for n in sorted(sup[t], key=lambda n: n["tag"]))
        cur = [c for c in current_of(t, sup) if c not in {n["tag"] for n in sup[t]}]
        return f"superseded by {by}" + (f"; current: {', '.join(cur)}" if cur else "")

    def link(t: str) -> str:
        page = f"{PAYLOAD_DIR}/{RELEASE_DIR}/index.md"
        return f"[{t}]({t}/{page})" if (folders[t] / page).is_file() else f"[{t}]({t}/)"

    lines = [
        "# Releases",
        "",
        "Generated by `evidence releases index` from the release folders beside this file (each one's release.json, "
        "data/analysis and data/release/notes.md); regenerate it, never edit it. A release folder is frozen and never "
        "changes: a newer release declares which one it supersedes (release.json `supersedes`, or an "
        '"Erratum to TAG" section of its notes), and `evidence verify` of the older one says so first.',
        "",
        "| release | frozen | status |",
        "|---|---|---|",
    ]
    lines += [f"| {link(t)} | {dig(metas[t], 'freeze', 'date') or '?'} | {status(t)} |" for t in order]
    for t in order:
        m = metas[t]
        runs = ", ".join(sorted(r.get("id", "?") for r in m.get("runs", []) if isinstance(r, dict)))
        sha = published_sha256(folders[t])
        tar = (
            f"`evidence archive releases/{t}` rebuilds releases/{t}.tar byte for byte (sha256 {sha})"
            if sha
            else "no archive sha256 committed"
        )
        lines += [
            "",
            f"## {t}",
            "",
            f"- Reading: {reading(folders[t], m)}",
            f"- Status: {status(t)}.",
            f"- Runs: {runs or 'none'}; frozen {dig(m, 'freeze', 'date') or '?'} by evidence "
            f"{dig(m, 'tool', 'version') or '?'} from commit {str(dig(m, 'freeze', 'code_commit') or '?')[:12]}.",
            f"- Verify: `evidence verify releases/{t}` (or its .tar); {tar}.",
        ]
    return "\n".join(lines) + "\n"


def write_catalog(releases: Path, *, check: bool = False) -> tuple[Path, bool]:
    """Write releases/README.md (or, with check, only compare). Returns (its path, whether it was or would be changed)."""
    out = Path(releases) / CATALOG
    text = render_catalog(releases)
    old = out.read_text(encoding="utf-8") if out.is_file() else None
    changed = old != text
    if changed and not check:
        write_atomic(out, text)
    return out, changed
