"""Fidelity: our client vs `vllm bench serve`'s on the same REAL vLLM server.

Both clients run the same workload (random prompts of --input-len tokens,
--output-len output tokens with ignore_eos, request rate inf, max concurrency
per point) against one running server, interleaved: for every repeat and point
each client runs once, and which goes first alternates. Reported per point: each
client's output throughput, mean and p99 TTFT, mean TPOT, and the ratio
ours / vLLM's, plus the prompt tokens each side's requests carried as the server
counted them (vLLM's client sends text re-encoded to about --input-len tokens;
ours sends exactly --input-len token ids by default).

A ratio near 1 (within run-to-run noise, about 10% on a 2-core CPU server) says
the two clients measure the same thing; a systematic gap is a finding to explain.

Same workload means the same request body too: vLLM's client sends no
temperature (the server's default applies: the model's generation_config, else
1.0, i.e. sampling) and `repetition_penalty: 1.0`; by default ours does the
same here. Greedy decoding (temperature 0, our loadgen's default) is a different,
cheaper workload: 15-18% more output tok/s on the CPU server at c32.

    python bench/bench_fidelity.py --base-url http://127.0.0.1:8000 --model NAME \
        --tokenizer models/tiny [--concurrency 1,8,32] [--input-len 128] [--output-len 32] \
        [--prompts-per-c 8] [--min-prompts 32] [--repeats 2] [--warmup 8] \
        [--prompt-form token_ids|text] [--write bench/RESULTS-fidelity.md]

The server must already be running (e.g. started by evidence's vLLM adapter, or
`vllm serve` through evidence/engines/vllm/launch.py). This script starts nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_client_ceiling import machine, run_ours, run_vllm  # noqa: E402

METRICS = ("output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True, help="the served model name")
    ap.add_argument("--tokenizer", required=True, help="the model folder (tokenizer) the server uses")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--prompts-per-c", type=int, default=8)
    ap.add_argument("--min-prompts", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=8, help="warm-up requests before each client's run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt-form", choices=("token_ids", "text"), default="token_ids")
    ap.add_argument("--temperature", default="server",
                    help="ours: 'server' leaves temperature out, as vLLM's client does (the server's default "
                         "applies); a number sends it (0 = greedy, a different and cheaper workload)")
    ap.add_argument("--repetition-penalty", default="1.0",
                    help="ours: sent as vLLM's client sends it (1.0); 'none' leaves it out")
    ap.add_argument("--http", default="h1", choices=("h1", "aiohttp"),
                    help="our client's HTTP stack (h1: what RESULTS-client.md measured; aiohttp: evidence run's default)")
    ap.add_argument("--write", default=None, help="append a results section to this markdown file")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    url = a.base_url.rstrip("/")
    points = [int(x) for x in a.concurrency.split(",")]
    temperature = None if a.temperature == "server" else float(a.temperature)
    extra_body = None if a.repetition_penalty == "none" else {"repetition_penalty": float(a.repetition_penalty)}
    rows = []
    k = 0
    for rep in range(a.repeats):
        for c in points:
            n = max(a.min_prompts, a.prompts_per_c * c)
            order = ("ours", "vllm") if k % 2 == 0 else ("vllm", "ours")
            k += 1
            for who in order:
                if who == "ours":
                    res = run_ours(url, a.model, c, n, a.input_len, a.output_len, a.seed, tokenizer=a.tokenizer,
                                   prompt_form=a.prompt_form, warmup=a.warmup, temperature=temperature,
                                   extra_body=extra_body, http=a.http)
                else:
                    res = run_vllm(url, a.model, c, n, a.input_len, a.output_len, a.seed, tokenizer=a.tokenizer,
                                   warmup=a.warmup)
                res.update(client=who, concurrency=c, prompts=n, repeat=rep + 1)
                rows.append(res)
                print(f"r{rep + 1} c{c:<4} {who:5} {res['output_throughput']:>9.1f} tok/s  "
                      f"TTFT {res['mean_ttft_ms']:.1f} ms  TPOT {res['mean_tpot_ms']:.2f} ms  "
                      f"failed {res['failed']}  prompt tokens {res['mean_prompt_tokens']}", flush=True)
    summary = []
    for c in points:
        d: dict = {"concurrency": c}
        for who in ("ours", "vllm"):
            rs = [r for r in rows if r["concurrency"] == c and r["client"] == who]
            d[who] = {m: statistics.mean(r[m] for r in rs) for m in METRICS}
            d[who]["runs"] = [r["output_throughput"] for r in rs]
            d[who]["failed"] = sum(r["failed"] for r in rs)
            pts = [r["mean_prompt_tokens"] for r in rs if r["mean_prompt_tokens"] is not None]
            d[who]["prompt_tokens"] = statistics.mean(pts) if pts else None
        d["ratio"] = {m: d["ours"][m] / d["vllm"][m] for m in METRICS if d["vllm"][m]}
        summary.append(d)
    info = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "command": "python " + " ".join(sys.argv), "base_url": url, "model": a.model,
            "tokenizer": a.tokenizer, "input_len": a.input_len, "output_len": a.output_len,
            "repeats": a.repeats, "prompt_form": a.prompt_form, "warmup": a.warmup,
            "temperature": a.temperature, "repetition_penalty": a.repetition_penalty,
            "load": os.getloadavg(), "summary": summary, "runs": rows}
    for d in summary:
        r = d["ratio"]
        print(f"c{d['concurrency']:<4} throughput {r['output_throughput']:.3f}x  mean TTFT "
              f"{r.get('mean_ttft_ms', float('nan')):.3f}x  mean TPOT {r.get('mean_tpot_ms', float('nan')):.3f}x")
    if a.json:
        Path(a.json).write_text(json.dumps(info, indent=1))
    if a.write:
        with open(a.write, "a", encoding="utf-8") as f:
            f.write(render(info))


def render(info: dict) -> str:
    m = info["machine"]
    lines = [
        f"\n## {info['date']}: {info['model']} at {info['base_url']}, {info['input_len']} in / "
        f"{info['output_len']} out, ours with {info['prompt_form']} prompts, temperature "
        f"{info.get('temperature', '?')}, repetition_penalty {info.get('repetition_penalty', '?')}\n",
        f"- Machine: {m['cpus']} cores ({m['cpu_model']}); server and clients share it.",
        f"- Command: `{info['command']}`",
        f"- {info['repeats']} repeat(s), clients alternating; {info['warmup']} warm-up requests before each run.",
        "",
        "| max concurrency | tok/s ours | tok/s vLLM | ratio | mean TTFT ms ours / vLLM | ratio | p99 TTFT ms ours / vLLM"
        " | mean TPOT ms ours / vLLM | ratio | prompt tokens seen ours / vLLM | failed |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for d in info["summary"]:
        o, v, r = d["ours"], d["vllm"], d["ratio"]
        lines.append(
            f"| {d['concurrency']} | {o['output_throughput']:,.1f} | {v['output_throughput']:,.1f} | "
            f"{r['output_throughput']:.3f} | {o['mean_ttft_ms']:.1f} / {v['mean_ttft_ms']:.1f} | "
            f"{r.get('mean_ttft_ms', float('nan')):.3f} | {o['p99_ttft_ms']:.1f} / {v['p99_ttft_ms']:.1f} | "
            f"{o['mean_tpot_ms']:.2f} / {v['mean_tpot_ms']:.2f} | {r.get('mean_tpot_ms', float('nan')):.3f} | "
            f"{o['prompt_tokens']} / {v['prompt_tokens']} | {o['failed']} / {v['failed']} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
