"""Formatting for the report: numbers, percents and dates as text, and the table/section shapes templates place.

Numbers are formatted here, once, so that templates only place strings.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Iterable, Sequence

from evidence.analysis.numbers import pct_text


def num(x: Any, d: int = 2) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    s = f"{x:,.{d}f}"
    return s[1:] if s.startswith("-") and float(s.replace(",", "")) == 0 else s


def pct(x: float | None, signed: bool = False, d: int = 3) -> str:
    return pct_text(x, d, signed)


def text(x: Any) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, (dict, list)):
        return json.dumps(x, sort_keys=True, ensure_ascii=False)
    return str(x)


def utc(ts: Any) -> str | None:
    if not isinstance(ts, (int, float)):
        return None
    return _dt.datetime.fromtimestamp(float(ts), tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def table(caption: str, headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None,
          note: str = "") -> dict:
    rows = [[c if isinstance(c, str) else text(c) for c in r] for r in rows]
    al = list(align) if align else ["l"] + ["r"] * (len(headers) - 1)
    assert len(al) == len(headers)
    return {"caption": caption, "headers": list(headers), "rows": rows, "align": al, "note": note}


def section(sid: str, title: str, paragraphs: Sequence[str] = (), tables: Sequence[dict] = (),
            figures: Sequence[str] = (), bullets: Sequence[str] = (), appendix: bool = False) -> dict:
    """A report section; `appendix` ones are collapsed (<details>) in the HTML and come last."""
    return {"id": sid, "title": title, "paragraphs": list(paragraphs), "tables": list(tables),
            "figures": list(figures), "bullets": list(bullets), "appendix": appendix}


def brief(v: Any, limit: int = 260) -> str:
    if isinstance(v, dict):
        parts = [f"{k}={brief(v[k], 70)}" for k in sorted(v) if not isinstance(v[k], (dict, list))]
        s = ", ".join(parts) if parts else f"{len(v)} entries"
    elif isinstance(v, list):
        s = "; ".join(brief(x, 80) for x in v)
    else:
        s = text(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def join_flags(xs: Sequence[str]) -> str:
    return "; ".join(xs) if xs else ""


def fixed(x: Any, d: int = 2, scale: float = 1.0, suffix: str = "") -> str:
    return "n/a" if x is None else f"{x * scale:,.{d}f}{suffix}"


def provenance_rows(prov: dict) -> list[tuple[str, str]]:
    """A few readable lines from provenance.json (free-form: every key is optional)."""
    rows: list[tuple[str, str]] = []
    if not isinstance(prov, dict):
        return rows
    if "host" in prov:
        rows.append(("host", brief(prov["host"])))
    if "container" in prov:
        rows.append(("container", brief(prov["container"])))
    acc = prov.get("accelerator")
    if isinstance(acc, dict):
        devs = [d for d in acc.get("devices") or [] if isinstance(d, dict)]
        if devs:
            names = sorted({str(d.get("name")) for d in devs})
            extra = ", ".join(f"{k} {acc[k]}" for k in ("driver", "cuda_driver_version") if acc.get(k))
            rows.append(("accelerator", f"{len(devs)} x {', '.join(names)}" + (f" ({extra})" if extra else "")
                         + (f"; visible {acc['visible_count']}" if "visible_count" in acc else "")))
        else:
            rows.append(("accelerator", f"none found ({acc.get('how', 'no detail')})" if acc.get("found") == "none"
                         else brief(acc)))
    elif acc is not None:
        rows.append(("accelerator", brief(acc)))
    if "engine" in prov:
        rows.append(("engine", brief(prov["engine"])))
    py = prov.get("python")
    if isinstance(py, dict) and any(isinstance(py.get(k), dict) for k in ("harness", "engine")):
        for side in ("harness", "engine"):
            info = py.get(side)
            if not isinstance(info, dict):
                continue
            pk = info.get("packages") if isinstance(info.get("packages"), dict) else {}
            keys = ", ".join(f"{n} {pk[n]}" for n in sorted(pk, key=str.lower) if n.lower() in KEY_PACKAGES)
            rows.append((f"python ({side})", f"{info.get('version', 'n/a')}; {len(pk)} packages recorded"
                         + (f"; {keys}" if keys else "") + (f"; {info['error']}" if info.get("error") else "")))
    elif py is not None:
        rows.append(("python", brief(py)))
    pk = prov.get("packages")
    if isinstance(pk, dict):
        rows.append(("packages", f"{len(pk)} recorded; " + ", ".join(
            f"{n} {pk[n]}" for n in sorted(pk, key=str.lower) if n.lower() in KEY_PACKAGES)))
    if "model" in prov:
        rows.append(("model", brief(prov["model"])))
    if "git" in prov:
        rows.append(("git", brief(prov["git"])))
    return rows


KEY_PACKAGES = {"vllm", "torch", "transformers", "numpy", "matplotlib", "aiohttp", "pydantic", "triton", "flashinfer",
                 "flash-attn", "flash_attn", "evidence"}
