#!/usr/bin/env python3
# Usage: python bench/h200/fidelity.py runs/<run-id>... (prints the Markdown tables of bench/h200/README.md)
"""Our client's output throughput per trial against the server's own vllm:generation_tokens_total rate
over the same window: the counter read at the trial's first send (the first sample, when it comes
before any token arrives) and interpolated linearly at its last completion; the token counts compared
too (our usage.completion_tokens sum vs the counter's increase to the first sample after the end)."""
import json, sys
from pathlib import Path
import numpy as np
for run in sys.argv[1:]:
    ratios, cratios, lines = [], [], []
    for d in sorted(Path(run, "trials").iterdir(), key=lambda p: (int(p.name.split('-c')[1]), int(p.name[1:].split('-')[0]))):
        recs = [json.loads(l) for l in (d / "requests.jsonl").read_text().splitlines() if l.strip()]
        recs = [r for r in recs if r["phase"] == "measure"]
        ok = [r for r in recs if r["ok"]]
        t0 = min(r["send_s"] for r in recs); t1 = max(r["end_s"] for r in ok)
        first_tok = min(r["first_chunk_s"] for r in ok)
        tel = [json.loads(l) for l in (d / "telemetry.jsonl").read_text().splitlines() if l.strip()]
        tel = [x for x in tel if "generation_tokens_total" in x]
        ts = np.array([x["t_s"] for x in tel]); g = np.array([x["generation_tokens_total"] for x in tel])
        assert ts[0] < first_tok, (d, ts[0], first_tok)
        g0 = g[0]  # no token of this trial before the first sample
        g1 = float(np.interp(t1, ts, g))
        after = g[ts >= t1][0] if (ts >= t1).any() else None
        s = json.loads((d / "summary.json").read_text())
        ours = s["output_throughput"]
        server = (g1 - g0) / (t1 - t0)
        r = ours / server
        ratios.append(r)
        tokens = sum(r_["completion_tokens"] for r_ in ok)
        cr = tokens / (after - g0) if after is not None else None
        if cr: cratios.append(cr)
        inside = [x for x in tel if t0 <= x["t_s"] <= t1]
        gpu = [x["gpu_util_pct"] for x in inside if "gpu_util_pct" in x]
        pw = [x["gpu_power_w"] for x in inside if "gpu_power_w" in x]
        lines.append(f"| {d.name} | {ours:,.0f} | {server:,.0f} | {r:.4f} | {cr:.4f} | {np.mean(gpu):.0f} | {np.mean(pw):.0f} |")
    print(f"#### {Path(run).name}\n")
    print("| trial | ours (tok/s) | server counter rate, same window | ratio | token count ratio | GPU busy % | power W |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(lines))
    print(f"\nthroughput ratio {min(ratios):.4f}-{max(ratios):.4f} (mean {np.mean(ratios):.4f}); token count ratio {min(cratios):.4f}-{max(cratios):.4f} (n={len(ratios)})\n")
