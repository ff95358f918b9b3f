"""A fast stand-in for an OpenAI-compatible streaming server.

THIS IS NOT AN ENGINE. It runs no model and its numbers say nothing about any
engine's performance. It exists only for what a real vLLM server cannot do on
demand:

- exact chunk timing (a configured time to first chunk and gap between chunks,
  on an absolute schedule), so client timing can be checked against known answers;
- faults: HTTP errors (500, ...), malformed SSE, SSE messages split across and
  glued within network reads, CRLF framing, comment lines, an error event in
  the stream, a stream cut short, a missing usage chunk or [DONE], hangs (before
  or during the stream) and dropped connections;
- measuring the load client's own ceiling: with zero delay it answers as fast as
  it can, so the client, not the server, is the bottleneck.

It serves /health, /version, /v1/models, /metrics (Prometheus text using vLLM's
`vllm:` names), /tokenize, /detokenize and /v1/completions (streaming, and a
plain JSON answer when `stream` is false).

Behaviour per request: server options (command line or `StandinServer(**opts)`)
give defaults; an `x-standin` header overrides them for one request, e.g.
`x-standin: ttft=0.05,itl=0.01,tokens=8,tpc=2,fault=drop,after=3,usage_delay=0.1`.

    ttft         seconds from the request to the first chunk
    itl          seconds between chunks; 0: no delay, but still one write per
                 chunk with a yield to the event loop between them, so every open
                 stream gets a chunk in turn (like an engine step), unless burst
    burst        1: with itl 0, the whole stream in one write
    step         with itl 0: chunks each open stream gets per step, in one write
                 (default 1; more makes the stand-in cheaper per token, for
                 measuring clients faster than a one-chunk-per-write stand-in)
    tokens       completion tokens to produce (default: the request's max_tokens)
    tpc          tokens per chunk (multi-token chunks; usage still counts tokens)
    fault        none | httpNNN | malformed | split | crlf | comment | error_event |
                 truncate | no_usage | no_done | hang | drop
    after        tokens sent before a mid-stream fault (malformed, error_event,
                 truncate, hang, drop); for hang, 0 hangs before any chunk
    usage_delay  seconds between the last token chunk and the usage chunk
    jitter       > 0: the request's itl is scaled by exp(N(0, jitter)) (noise between trials)

The tokenizer is a toy: id k is the word " w<k>", ids 4-13 are the digits
"0"-"9" (no leading space), other text becomes one token per character. With
`quirk=Q` (>0), a word whose number (>= 10) is a multiple of Q tokenizes as the
word for k//10 plus a digit, and a digit after a word merges into it, so
decode-then-encode changes lengths both ways, as real BPE tokenizers do. With
`bos=True` it adds id 1 as a special token when `add_special_tokens` is true.

Run: `python -m evidence.tools.standin --port 8123 [--itl 0] [--ttft 0]` (prints the
URL, stops on SIGINT/SIGTERM). In-process: `with StandinServer(itl_s=0.01) as
url: ...` starts it on a free port in a thread with its own event loop.
"""

from evidence.tools.standin.serve import StandinServer, main
from evidence.tools.standin.server import (
    FAULTS, Behavior, Counters, Options, Standin, detokenize, make_app, prompt_key, tokenize,
)

__all__ = ["FAULTS", "Behavior", "Counters", "Options", "Standin", "StandinServer", "detokenize", "main", "make_app",
           "prompt_key", "tokenize"]
