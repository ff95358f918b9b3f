"""For releases frozen before they carried their regenerator: the flat package of that time
(evidence.analysis, evidence.figures, evidence.report), called in one pass the way evidence.derive does.
argv: ws work sde run_id (ws: the raw files already copied to work/<run-id>). Standard library only:
see drivers/__init__.py."""

import json
import os
import sys
from pathlib import Path

ws, work, sde, run_id = sys.argv[1:5]
ws = Path(ws)
if sde:
    os.environ["SOURCE_DATE_EPOCH"] = sde


def say(s):
    print(json.dumps({"step": s}), flush=True)


roles = ("analysis", "figures", "report")
err = {}
for r in roles:
    (ws / r).mkdir(parents=True, exist_ok=True)
try:
    import copy

    try:  # the trace analyses are a pure function of the raw files, computed by the analysis and again by the
        # report in that code: computed once here and handed out as copies (the bytes are compared anyway)
        import evidence.profile_run as _pr

        _analyze, _memo = _pr.analyze_profile, {}

        def _once(run_dir):
            k = str(Path(run_dir).resolve())
            if k not in _memo:
                _memo[k] = _analyze(run_dir)
            return copy.deepcopy(_memo[k])

        _pr.analyze_profile = _once
    except (ImportError, AttributeError):
        pass
    from evidence.analysis import compute_analysis, load_run, write_analysis, write_extras
    from evidence.figures import figure_bytes, render_figures
    from evidence.report import render_report

    say("reading raw records")
    data = load_run(ws)
    say("computing the analysis")
    res = compute_analysis(data)
except Exception as e:
    err = {r: f"{type(e).__name__}: {e}" for r in roles}
if not err:
    say("writing the analysis")
    try:
        write_analysis(res, ws / "analysis")
        write_extras(ws, ws / "analysis")
    except Exception as e:
        err["analysis"] = f"{type(e).__name__}: {e}"
    say("rendering figures")
    try:
        figs = figure_bytes(data, res)
        render_figures(ws, ws / "figures", data=data, analysis=res, rendered=figs)
    except Exception as e:
        err["figures"] = err["report"] = f"{type(e).__name__}: {e}"
    if "report" not in err:
        say("writing the report")
        try:
            render_report(
                ws, ws / "report", data=data, analysis=res, figures=figs, figures_rel=f"../../figures/{run_id}"
            )
        except Exception as e:
            err["report"] = f"{type(e).__name__}: {e}"
print(json.dumps({"done": {r: err.get(r) for r in roles}}), flush=True)
