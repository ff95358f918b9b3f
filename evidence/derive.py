"""One analysis -> figures -> report pass over a run's raw files.

The analysis is computed once and handed to the figures and the report, and the figure bytes
once and handed to the report (which embeds them). `evidence report` and release regeneration
(freeze and verify) both call this, so a run's derived files have one definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

PARTS = ("analysis", "figures", "report")
STEPS = ("reading raw records", "computing the analysis", "writing the analysis", "rendering figures",
         "writing the report")  # what `step` is called with, in this order (the last ones only when asked for)

Step = Callable[[str], None]


@dataclass
class Derived:
    analysis: dict  # the analysis.json content
    files: dict[str, list[Path]] = field(default_factory=dict)  # part -> files written


def derive_run(run_dir: Path, out_root: Path | None = None, *, parts: Iterable[str] = PARTS,
               templates_dir: Path | None = None, figures_rel: str = "../figures",
               step: Step | None = None) -> Derived:
    """Write the asked-for parts into out_root/<part>/ (default: the run directory itself).

    figures_rel: where report.md links its figures, relative to the report folder. `step` is told
    each phase as it starts (see STEPS), for a truthful progress display."""
    from evidence.analysis.analyze import compute_analysis, write_analysis, write_extras
    from evidence.analysis.load import load_run
    from evidence.figures import figure_bytes, render_figures
    from evidence.report.context import render_report
    from evidence.traces.profile import analyze_profile

    parts = tuple(parts)
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise ValueError(f"unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}")
    say = step or (lambda s: None)
    run_dir = Path(run_dir)
    root = Path(out_root) if out_root is not None else run_dir
    say(STEPS[0])
    data = load_run(run_dir)
    say(STEPS[1])
    res = compute_analysis(data)
    out = Derived(res)
    # the trace analyses feed both the tables and the report: read and analysed once
    prof = analyze_profile(run_dir) if {"analysis", "report"} & set(parts) else None
    if "analysis" in parts:
        say(STEPS[2])
        out.files["analysis"] = (write_analysis(res, root / "analysis")
                                 + write_extras(run_dir, root / "analysis", profile=prof))
    figs = None
    if "figures" in parts or "report" in parts:
        say(STEPS[3])
        figs = figure_bytes(data, res)
    if "figures" in parts:
        out.files["figures"] = render_figures(run_dir, root / "figures", data=data, analysis=res, rendered=figs)
    if "report" in parts:
        say(STEPS[4])
        out.files["report"] = render_report(run_dir, root / "report", data=data, analysis=res, figures=figs,
                                            templates_dir=templates_dir, figures_rel=figures_rel, profile=prof)
    return out


def derive(run_dir: Path, out_root: Path | None = None, *, parts: Iterable[str] = PARTS) -> dict[str, list[Path]]:
    """part -> files written; see derive_run."""
    return derive_run(run_dir, out_root, parts=parts).files
