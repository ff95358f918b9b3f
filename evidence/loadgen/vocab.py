"""Where the prompts' token ids come from, for a spec: a local folder, a cached tokenizer, or the server.

Both prompt forms need a bound below which every id is an ordinary token of the
server's tokenizer (the random ids are drawn below it). In order of preference:

1. a local folder: `model.tokenizer` when it is a folder, else `model.path`
   (what a run of the vllm kind always had; unchanged);
2. a tokenizer named by id (`model.tokenizer`, else `model.id`) that is already
   in the Hugging Face cache (`$HF_HUB_CACHE`, `$HF_HOME/hub`,
   `~/.cache/huggingface/hub`; nothing is downloaded);
3. the server itself, so an `endpoint` needs nothing local: `/detokenize` of one
   id answers an empty text (vLLM) or HTTP 400 (others) past the tokenizer's
   last id; a search finds that end, then the added special tokens just below it
   (texts like `<|im_end|>`, `</s>`, `[PAD]`) are left out, as the local rule
   leaves out everything above the base vocabulary.

`/v1/models` gives the server's `max_model_len`; a workload whose longest prompt
plus its output does not fit is refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from evidence.loadgen import prompts as pr
from evidence.spec.model import Spec

# What an added special token's text looks like: <|im_end|>, <s>, </tool_call>, [PAD].
_SPECIAL_TEXT = re.compile(r"^(<\|[^\s|]{1,60}\|>|</?[A-Za-z_][\w.:-]{0,60}>|\[[A-Z][A-Z_]{1,30}\])$")
_MAX_SPECIAL_WALK = 512
_MAX_VOCAB = 1 << 24


@dataclass(frozen=True)
class Vocabulary:
    bound: int  # ids in [reserved_low, bound) are ordinary tokens
    exclude: tuple[int, ...]  # special ids inside that range
    source: str  # where the bound was read, in words


def hf_cached_dir(repo_id: str, revision: str | None = None) -> Path | None:
    """The snapshot folder of `repo_id` in the local Hugging Face cache, or None (nothing is downloaded)."""
    if not re.match(r"^[\w.-]+/[\w.-]+$", repo_id or ""):
        return None
    roots = [os.environ.get("HF_HUB_CACHE"),
             os.path.join(os.environ["HF_HOME"], "hub") if os.environ.get("HF_HOME") else None,
             os.path.expanduser("~/.cache/huggingface/hub")]
    for root in filter(None, roots):
        d = Path(root) / ("models--" + repo_id.replace("/", "--"))
        rev = revision
        if rev is None:
            ref = d / "refs" / "main"
            if not ref.is_file():
                continue
            rev = ref.read_text(encoding="utf-8").strip()
        snap = d / "snapshots" / rev
        if (snap / "tokenizer.json").is_file() or (snap / "config.json").is_file():
            return snap
    return None


def local_vocabulary(spec: Spec, repo_root: Path) -> Vocabulary | None:
    """The vocabulary from a local folder or the HF cache (steps 1 and 2), or None."""
    m = spec.model
    cands: list[tuple[Path, str]] = []
    for p, what in ((m.tokenizer, "model.tokenizer"), (m.path, "model.path")):
        if p:
            q = Path(p).expanduser()
            q = q if q.is_absolute() else repo_root / q
            if q.is_dir():
                cands.append((q, f"the tokenizer in {q} ({what})"))
    for rid in (m.tokenizer, m.id):
        if rid:
            snap = hf_cached_dir(rid, m.revision if rid == m.id else None)
            if snap is not None:
                cands.append((snap, f"tokenizer {rid} from the Hugging Face cache ({snap})"))
    for folder, source in cands:
        try:
            return Vocabulary(pr.vocab_size_from_model_dir(folder),
                              tuple(pr.special_token_ids_from_model_dir(folder)), source)
        except (FileNotFoundError, ValueError, KeyError):
            continue
    return None


async def _post(session: Any, url: str, body: dict, headers: Mapping[str, str] | None) -> tuple[int, Any]:
    async with session.post(url, json=body, headers=dict(headers or {})) as resp:
        text = await resp.text()
        try:
            return resp.status, json.loads(text)
        except json.JSONDecodeError:
            return resp.status, text


async def server_vocabulary(session: Any, base_url: str, model: str, *,
                            headers: Mapping[str, str] | None = None,
                            reserved_low: int = pr.DEFAULT_RESERVED_LOW) -> Vocabulary:
    """The bound from the server's own `/detokenize` (step 3)."""
    url = base_url.rstrip("/") + "/detokenize"
    texts: dict[int, str | None] = {}

    async def text(i: int) -> str | None:
        """The id's text, or None past the tokenizer's end."""
        if i not in texts:
            status, body = await _post(session, url, {"model": model, "tokens": [i]}, headers)
            if status == 200 and isinstance(body, dict) and isinstance(body.get("prompt"), str):
                texts[i] = body["prompt"] or None
            elif status in (400, 422):
                texts[i] = None
            else:
                raise pr.PromptError(
                    f"the server at {base_url} cannot tell its vocabulary: POST /detokenize answered HTTP {status} "
                    f"{str(body)[:200]}. Give the tokenizer locally (model.tokenizer: a folder, or a model id in the "
                    "Hugging Face cache)" + (" or set the API key's variable (engine.api_key_env)"
                                             if status in (401, 403) else ""))
        return texts[i]

    if await text(reserved_low) is None:
        raise pr.PromptError(f"the server at {base_url} detokenizes no id at {reserved_low}; its vocabulary cannot be "
                             "read from /detokenize. Give the tokenizer locally (model.tokenizer).")
    lo, hi = reserved_low, 1024  # text(lo) is known; find hi with text(hi) None
    while await text(hi) is not None:
        lo, hi = hi, hi * 2
        if hi > _MAX_VOCAB:
            raise pr.PromptError(f"the server at {base_url} detokenizes every id up to {_MAX_VOCAB}; its vocabulary "
                                 "has no end this probe can find. Give the tokenizer locally (model.tokenizer).")
    while hi - lo > 1:  # text(lo) is set, text(hi) is None
        mid = (lo + hi) // 2
        if await text(mid) is None:
            hi = mid
        else:
            lo = mid
    end = hi  # first id past the tokenizer
    bound = end
    for i in range(end - 1, max(reserved_low, end - _MAX_SPECIAL_WALK) - 1, -1):
        t = await text(i)
        if t is None or not _SPECIAL_TEXT.match(t.strip()):
            break
        bound = i
    note = f"; {end - bound} special token(s) below it left out" if bound < end else ""
    return Vocabulary(bound, (), f"the server's /detokenize at {base_url}: ids end at {end}{note}")


async def server_max_model_len(session: Any, base_url: str, model: str, *,
                               headers: Mapping[str, str] | None = None) -> int | None:
    """`max_model_len` of `model` in the server's `/v1/models`, or None when it does not say."""
    try:
        async with session.get(base_url.rstrip("/") + "/v1/models", headers=dict(headers or {})) as resp:
            if resp.status != 200:
                return None
            data = (await resp.json(content_type=None)).get("data") or []
    except (OSError, ValueError, AttributeError, asyncio.TimeoutError):
        return None
    for m in data:
        if isinstance(m, dict) and m.get("id") == model and isinstance(m.get("max_model_len"), int):
            return m["max_model_len"]
    return None


def prompts_for_spec(spec: Spec, *, repo_root: Path, base_url: str, model: str, n: int, seed: int,
                     api_key: str | None = None) -> list[pr.Prompt]:
    """The `n` prompts of a trial (seeded), for either prompt form; raises PromptError with the reason."""
    import aiohttp

    from evidence.loadgen.trial import run_sync

    w = spec.workload
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    vocab = local_vocabulary(spec, Path(repo_root))

    async def go() -> list[pr.Prompt]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=w.request_timeout_s)) as s:
            v = vocab or await server_vocabulary(s, base_url, model, headers=headers)
            limit = await server_max_model_len(s, base_url, model, headers=headers)
            if limit is not None:
                longest = pr.length_range(w.input_len, w.range_ratio)[1] + pr.length_range(w.output_len, w.range_ratio)[1]
                if longest > limit:
                    raise pr.PromptError(
                        f"the workload needs up to {longest} tokens per request (input_len {w.input_len} + output_len "
                        f"{w.output_len}, range_ratio {w.range_ratio}) but the server's max_model_len for {model} is "
                        f"{limit} (/v1/models); every request would be refused. Shorten the workload or serve a "
                        "longer context (engine.args.max_model_len).")
            if w.prompt_form == "token_ids":
                return pr.make_token_prompts(n, w.input_len, w.output_len, seed, v.bound, range_ratio=w.range_ratio,
                                             exclude=v.exclude)
            return await pr.make_text_prompts(s, base_url, model, n, w.input_len, w.output_len, seed, v.bound,
                                              range_ratio=w.range_ratio, headers=headers)

    return run_sync(go())
