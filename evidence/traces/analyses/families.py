"""b. Kernel families: ordered regex rules on the demangled name, first match wins.

Summed kernel time per family inside the window, with a per-output-token cost when
the tokens generated in the same window are known.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from evidence.traces.analyses.window import Window, clipped_ns, resolve_window, select_kernels
from evidence.traces.model import KernelTable, TraceError

__all__ = [
    "GEOMETRY_KINDS", "FamilyRule", "DEFAULT_RULES", "OTHER", "FamilyRow", "FamilyReport",
    "load_rules", "classify", "families", "per_token", "token_reason",
]

GEOMETRY_KINDS = ("opaque", "fa2_splitkv", "persistent")


@dataclass(frozen=True)
class FamilyRule:
    """One ordered classification rule.

    name      the rule's id (unique); family: the bucket it reports into (default: name)
    pattern   regex searched in the demangled kernel name
    geometry  what the launch grid means for this kernel:
              "fa2_splitkv"  grid = (ceil(max_q_len/64), splits>1 ? splits : batch,
                             splits>1 ? batch*heads : heads) - gridX encodes the query chunk
              "persistent"   grid = SM count: carries no query-length meaning
              "opaque"       no declared meaning; grids are listed, not interpreted
    layer_marker  the kernel runs exactly once per transformer layer per forward
                  (used to reconstruct forwards)
    """

    name: str
    pattern: str
    family: str | None = None
    geometry: str = "opaque"
    layer_marker: bool = False

    def __post_init__(self) -> None:
        if self.geometry not in GEOMETRY_KINDS:
            raise ValueError(f"rule {self.name!r}: geometry must be one of {', '.join(GEOMETRY_KINDS)}, not {self.geometry!r}")
        try:
            re.compile(self.pattern)
        except re.error as e:
            raise ValueError(f"rule {self.name!r}: bad regex {self.pattern!r}: {e}") from None

    @property
    def family_name(self) -> str:
        return self.family or self.name


DEFAULT_RULES: tuple[FamilyRule, ...] = (
    FamilyRule("fa2_splitkv", r"flash_fwd_splitkv", "attention", geometry="fa2_splitkv", layer_marker=True),
    FamilyRule("fa3", r"FlashAttnFwdSm90", "attention", geometry="persistent", layer_marker=True),
    FamilyRule("fa3_combine", r"flash::FlashAttnFwdCombine", "attention"),
    FamilyRule("flash_fwd", r"flash_fwd", "attention"),
    FamilyRule("gemm", r"gemm|nvjet|cutlass(?!.*flash)|gemv|splitKreduce|cublas"),
    FamilyRule("triton", r"^triton_"),
    FamilyRule("kv_cache_write", r"reshape_and_cache"),
)
OTHER = FamilyRule("other", r"", "other")
_SLICE = 1 << 18


def load_rules(path: str | Path) -> tuple[FamilyRule, ...]:
    """Rules from YAML or JSON, in order. Accepted shapes:

    - a list of {name, pattern, family?, geometry?, layer_marker?}
    - a list of [name, pattern] pairs
    - a mapping {name: pattern} (file order kept)
    - any of these under a top-level `rules:` key
    Kernels matching none fall into "other".
    """
    import yaml

    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise TraceError(f"Cannot read the rules file {p}: {e.strerror or e}.") from None
    except yaml.YAMLError as e:
        raise TraceError(f"The rules file {p} is not valid YAML/JSON: {e}".replace("\n", " ")) from None
    if isinstance(doc, dict) and "rules" in doc:
        doc = doc["rules"]
    items: list[Any]
    if isinstance(doc, dict):
        items = [{"name": k, "pattern": v} for k, v in doc.items()]
    elif isinstance(doc, list):
        items = doc
    else:
        raise TraceError(f"The rules file {p} must hold a list of rules (name + pattern) or a name: pattern mapping.")
    rules = []
    for i, it in enumerate(items):
        try:
            if isinstance(it, (list, tuple)) and len(it) == 2:
                rules.append(FamilyRule(str(it[0]), str(it[1])))
            elif isinstance(it, dict):
                extra = set(it) - {"name", "pattern", "family", "geometry", "layer_marker"}
                if extra:
                    raise ValueError(f"unknown key(s) {', '.join(sorted(extra))}")
                rules.append(FamilyRule(str(it["name"]), str(it["pattern"]), it.get("family"),
                                        it.get("geometry", "opaque"), bool(it.get("layer_marker", False))))
            else:
                raise ValueError("expected {name, pattern, ...} or [name, pattern]")
        except (KeyError, ValueError) as e:
            raise TraceError(f"The rules file {p}, rule {i + 1}: {e}.") from None
    names = [r.name for r in rules]
    dup = sorted(n for n, c in Counter(names).items() if c > 1)
    if dup:
        raise TraceError(f"The rules file {p} names rule(s) {', '.join(dup)} more than once; rule names must be unique.")
    return tuple(rules)


def classify(kernels: KernelTable, rules: Sequence[FamilyRule] = DEFAULT_RULES) -> tuple[np.ndarray, tuple[FamilyRule, ...]]:
    """Rule index for each kernel (first match wins); the last index is "other".

    Matching runs once per distinct name, then maps through the name codes.
    """
    all_rules = tuple(rules) + (OTHER,)
    compiled = [re.compile(r.pattern) for r in rules]
    per_name = np.array(
        [next((i for i, c in enumerate(compiled) if c.search(nm)), len(rules)) for nm in kernels.categories("name")],
        dtype=np.int32,
    )
    return per_name[kernels.codes("name")], all_rules


@dataclass(frozen=True)
class FamilyRow:
    family: str
    rules: tuple[str, ...]
    count: int
    total_ns: int
    mean_ns: float | None
    share: float | None  # of all kernel time in the window
    per_token_ns: float | None


@dataclass(frozen=True)
class FamilyReport:
    window: Window
    output_tokens: int | None
    per_token_reason: str | None
    families: tuple[FamilyRow, ...]
    by_rule: tuple[FamilyRow, ...]
    total: FamilyRow


def per_token(total_ns: int, tokens: int | None) -> float | None:
    return total_ns / tokens if tokens else None


def token_reason(tokens: int | None) -> str | None:
    """Why a per-token cost is absent (None when it is not)."""
    if tokens is None:
        return "no output-token count for the window was given (--tokens); per-token cost not computed"
    if tokens <= 0:
        return f"output-token count {tokens} is not positive; per-token cost not computed"
    return None


def families(
    kernels: KernelTable, rules: Sequence[FamilyRule] = DEFAULT_RULES,
    window: tuple[int | None, int | None] | Window | None = None, *,
    output_tokens: int | None = None, device: int | None = None, pid: int | None = None,
) -> FamilyReport:
    """Summed kernel time per family inside the window (durations clipped to it)."""
    w = resolve_window(kernels, window)
    m = select_kernels(kernels, w, device=device, pid=pid)
    rule_idx, all_rules = classify(kernels, rules)
    ri = rule_idx[m]
    dur = clipped_ns(kernels, m, w)
    tokens = output_tokens if output_tokens and output_tokens > 0 else None
    grand = int(dur.sum())

    # Per rule, a slice at a time (bincount would widen all of ri and dur at once); the float64
    # sums are of integers, exact below 2**53 ns, so slicing changes no digit.
    counts = np.zeros(len(all_rules), np.int64)
    totals = np.zeros(len(all_rules))
    for a in range(0, len(ri), _SLICE):
        counts += np.bincount(ri[a:a + _SLICE], minlength=len(all_rules))
        totals += np.bincount(ri[a:a + _SLICE], weights=dur[a:a + _SLICE], minlength=len(all_rules))
    by_rule = []
    fam_order: list[str] = []
    fam_acc: dict[str, list] = {}
    for i, r in enumerate(all_rules):
        c, t = int(counts[i]), int(round(totals[i]))
        by_rule.append(FamilyRow(r.family_name, (r.name,), c, t, t / c if c else None,
                                 t / grand if grand else None, per_token(t, tokens)))
        f = r.family_name
        if f not in fam_acc:
            fam_order.append(f)
            fam_acc[f] = [[], 0, 0]
        fam_acc[f][0].append(r.name)
        fam_acc[f][1] += c
        fam_acc[f][2] += t
    fams = tuple(
        FamilyRow(f, tuple(fam_acc[f][0]), fam_acc[f][1], fam_acc[f][2],
                  fam_acc[f][2] / fam_acc[f][1] if fam_acc[f][1] else None,
                  fam_acc[f][2] / grand if grand else None, per_token(fam_acc[f][2], tokens))
        for f in fam_order
    )
    n = int(m.sum())
    total = FamilyRow("total", tuple(r.name for r in all_rules), n, grand, grand / n if n else None,
                      1.0 if grand else None, per_token(grand, tokens))
    return FamilyReport(w, output_tokens, token_reason(output_tokens), fams, tuple(by_rule), total)

