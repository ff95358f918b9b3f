"""Random prompts of exact length, reproducible anywhere.

Two forms:

- Token-id prompts (`make_token_prompts`): lists of token ids sent as the
  `prompt` of `/v1/completions`. The server sees exactly these ids, so the
  length question does not arise.
- Text prompts (`make_text_prompts`): random ids turned into text by the
  server's own `/detokenize`, then counted by its `/tokenize` and adjusted
  (trimmed or extended, then checked again) until the server's tokenizer sees
  exactly `input_len` tokens, special tokens included. Decode-then-encode does
  not round-trip (the seed article's nominal 512-token prompts were 540-541
  tokens model-side), which is why the server's count is what we record.

Determinism: ids come from SHAKE-256 of a fixed label, the seed and the prompt
index, read as little-endian uint32 and reduced modulo the id range. This is
the same on every machine, process, Python and numpy version (no `hash()`, no
library RNG stream whose algorithm could change), and prompt i does not depend
on how many prompts are made. The modulo bias is below span/2**32 (< 4e-5 for a
150k vocabulary).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

# Ids below this are not drawn by default: several tokenizer families put
# <unk>/<s>/</s>/<pad> and other control tokens at the bottom of the id space.
DEFAULT_RESERVED_LOW = 16
_LABEL = "evidence.prompts/v1"


@dataclass
class Prompt:
    i: int
    token_ids: list[int] | None  # the ids sent (token-id form); None for text prompts
    text: str | None  # the text sent (text form); None for token-id prompts
    prompt_len: int  # tokens the server will see (exact for token ids; the server's count for text)
    max_tokens: int
    # Text prompts only: what the server's /tokenize counted for `text` (special
    # tokens included) and how many adjust rounds it took; mismatch = seen - target.
    seen_len: int | None = None
    target_len: int | None = None
    rounds: int = 0

    @property
    def mismatch(self) -> int:
        if self.seen_len is None or self.target_len is None:
            return 0
        return self.seen_len - self.target_len

    @property
    def payload_prompt(self) -> list[int] | str:
        if self.token_ids is not None:
            return self.token_ids
        assert self.text is not None
        return self.text

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------- randomness ----


def _shake(label: str, nbytes: int) -> bytes:
    return hashlib.shake_256(label.encode("utf-8")).digest(nbytes)


def _ids(label: str, count: int, lo: int, hi: int) -> list[int]:
    """`count` ids in [lo, hi) from the labelled SHAKE-256 stream."""
    if count <= 0:
        return []
    if hi <= lo:
        raise ValueError(f"empty id range [{lo}, {hi})")
    a = np.frombuffer(_shake(label, 4 * count), dtype="<u4").astype(np.int64)
    return (lo + a % (hi - lo)).tolist()


def _uniform_int(label: str, lo: int, hi: int) -> int:
    """An integer in [lo, hi] (inclusive) from the labelled stream."""
    if hi <= lo:
        return lo
    v = int.from_bytes(_shake(label, 8), "little")
    return lo + v % (hi - lo + 1)


def length_range(nominal: int, range_ratio: float) -> tuple[int, int]:
    """Inclusive [lo, hi] for a length drawn around `nominal` (vLLM's random dataset's rule)."""
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError("range_ratio must be in [0, 1)")
    lo = max(1, math.floor(nominal * (1.0 - range_ratio)))
    hi = max(lo, math.ceil(nominal * (1.0 + range_ratio)))
    return lo, hi


def prompt_lengths(i: int, input_len: int, output_len: int, seed: int, range_ratio: float) -> tuple[int, int]:
    if range_ratio == 0.0:
        return input_len, output_len
    ilo, ihi = length_range(input_len, range_ratio)
    olo, ohi = length_range(output_len, range_ratio)
    return (_uniform_int(f"{_LABEL}/len-in/{seed}/{i}", ilo, ihi),
            _uniform_int(f"{_LABEL}/len-out/{seed}/{i}", olo, ohi))


def _check(n: int, input_len: int, output_len: int, vocab_size: int, reserved_low: int) -> None:
    if n < 0:
        raise ValueError("n must be >= 0")
    if input_len < 1 or output_len < 1:
        raise ValueError("input_len and output_len must be >= 1")
    if vocab_size - reserved_low < 2:
        raise ValueError(f"vocab_size {vocab_size} leaves no ids above reserved_low {reserved_low}")


# ---------------------------------------------------------- token prompts ----


def make_token_prompts(n: int, input_len: int, output_len: int, seed: int, vocab_size: int,
                       range_ratio: float = 0.0, reserved_low: int = DEFAULT_RESERVED_LOW,
                       exclude: Iterable[int] = ()) -> list[Prompt]:
    """`n` token-id prompts of exactly `input_len` ids (or a seeded length within
    `range_ratio` of it), ids uniform in [reserved_low, vocab_size) minus `exclude`.

    Pass as `vocab_size` a bound below which every id is an ordinary token of
    the server's tokenizer (`vocab_size_from_model_dir` gives one): vLLM rejects
    ids above the tokenizer's largest id.
    """
    _check(n, input_len, output_len, vocab_size, reserved_low)
    excl = sorted({int(x) for x in exclude if reserved_low <= int(x) < vocab_size})
    out = []
    for i in range(n):
        L, M = prompt_lengths(i, input_len, output_len, seed, range_ratio)
        ids = _draw(f"{_LABEL}/ids/{seed}/{i}", L, reserved_low, vocab_size, excl)
        out.append(Prompt(i=i, token_ids=ids, text=None, prompt_len=L, max_tokens=M))
    return out


def _draw(label: str, count: int, lo: int, hi: int, excl: list[int]) -> list[int]:
    if not excl:
        return _ids(label, count, lo, hi)
    # Draw from the allowed ids only (a dense table keeps it exact and seeded).
    allowed = np.setdiff1d(np.arange(lo, hi, dtype=np.int64), np.asarray(excl, dtype=np.int64))
    idx = _ids(label, count, 0, len(allowed))
    return allowed[idx].tolist()


# ----------------------------------------------------------- text prompts ----


class PromptError(Exception):
    pass


async def _post_json(session: Any, url: str, body: dict, headers: dict[str, str] | None = None) -> dict:
    async with session.post(url, json=body, headers=headers) as resp:
        text = await resp.text()
        if resp.status != 200:
            raise PromptError(f"POST {url} -> HTTP {resp.status}: {text[:300]}")
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise PromptError(f"POST {url} returned non-JSON: {text[:300]}") from exc


async def _detokenize(session: Any, base: str, model: str, ids: list[int], headers: dict[str, str] | None = None) -> str:
    d = await _post_json(session, base + "/detokenize", {"model": model, "tokens": ids}, headers)
    return d["prompt"]


async def _tokenize(session: Any, base: str, model: str, text: str, special: bool,
                    headers: dict[str, str] | None = None) -> list[int]:
    d = await _post_json(session, base + "/tokenize", {"model": model, "prompt": text, "add_special_tokens": special},
                         headers)
    return list(d["tokens"])


async def make_text_prompts(session: Any, base_url: str, model: str, n: int, input_len: int, output_len: int,
                            seed: int, vocab_size: int, *, range_ratio: float = 0.0,
                            reserved_low: int = DEFAULT_RESERVED_LOW, max_rounds: int = 10,
                            parallel: int = 8, strict: bool = False,
                            headers: dict[str, str] | None = None) -> list[Prompt]:
    """`n` text prompts that the server's own tokenizer counts as exactly `input_len`
    tokens (special tokens it adds included, as `/v1/completions` adds them).

    Per prompt: draw ids; then up to `max_rounds` times: `/detokenize` them,
    `/tokenize` the text; if the count is right stop, else keep the server's
    ids up to one short of the target (too long) or all of them (too short),
    fill up with fresh seeded ids and go again. A prompt that
    does not converge keeps the last text with `seen_len` recording the server's
    count (`mismatch` != 0); with `strict=True` that raises instead. `headers` go
    with every request (the API key: `Authorization: Bearer ...`).
    """
    _check(n, input_len, output_len, vocab_size, reserved_low)
    base = base_url.rstrip("/")
    # How many special tokens does the server add to a completion prompt? (BOS, ...)
    probe = await _detokenize(session, base, model, _ids(f"{_LABEL}/probe/{seed}", 8, reserved_low, vocab_size),
                              headers)
    with_sp = await _tokenize(session, base, model, probe, True, headers)
    without = await _tokenize(session, base, model, probe, False, headers)
    n_special = len(with_sp) - len(without)
    sem = asyncio.Semaphore(max(1, parallel))

    async def one(i: int) -> Prompt:
        L, M = prompt_lengths(i, input_len, output_len, seed, range_ratio)
        content_target = L - n_special
        if content_target < 1:
            raise PromptError(f"input_len {L} leaves no room beside {n_special} special token(s)")
        ids = _ids(f"{_LABEL}/ids/{seed}/{i}", content_target, reserved_low, vocab_size)
        async with sem:
            text, seen, rounds, back = "", -1, 0, 0
            for rounds in range(1, max_rounds + 1):
                text = await _detokenize(session, base, model, ids, headers)
                seen_ids = await _tokenize(session, base, model, text, True, headers)
                seen = len(seen_ids)
                if seen == L:
                    break
                content = await _tokenize(session, base, model, text, False, headers)
                if len(content) > content_target:
                    # Too long: keep the server's tokens up to the target, then, if still too
                    # long next time, one fewer each time, drawing fresh ids for the rest.
                    # (Cutting at the target alone can be a fixed point: a cut inside a multi-byte
                    # character decodes to U+FFFD, which re-encodes as several tokens.)
                    keep = content[:max(1, content_target - back)]
                    back += 1
                else:
                    keep = content  # too short: extend
                ids = keep + _ids(f"{_LABEL}/fix/{seed}/{i}/{rounds}", content_target - len(keep),
                                  reserved_low, vocab_size)
        if seen != L and strict:
            raise PromptError(f"prompt {i}: the server counts {seen} tokens, wanted {L}, after {rounds} rounds")
        return Prompt(i=i, token_ids=None, text=text, prompt_len=seen, max_tokens=M,
                      seen_len=seen, target_len=L, rounds=rounds)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


# ------------------------------------------------------- model folder info ----


def _tokenizer_json(path: Path) -> dict | None:
    p = path / "tokenizer.json"
    if p.is_file():
        return json.loads(p.read_text(encoding="utf-8"))
    return None


def vocab_size_from_model_dir(path: str | Path) -> int:
    """A bound below which every id is an ordinary token of the model's tokenizer.

    The smaller of config.json's `vocab_size` (the embedding rows; often padded
    above the tokenizer) and the tokenizer's base vocabulary (tokenizer.json's
    model vocab, which excludes added special tokens). Falls back to whichever
    of the two exists.
    """
    path = Path(path)
    cands: list[int] = []
    cfg = path / "config.json"
    if cfg.is_file():
        c = json.loads(cfg.read_text(encoding="utf-8"))
        v = c.get("vocab_size") or (c.get("text_config") or {}).get("vocab_size")
        if isinstance(v, int) and v > 0:
            cands.append(v)
    tj = _tokenizer_json(path)
    if tj is not None:
        vocab = (tj.get("model") or {}).get("vocab")
        if isinstance(vocab, dict) and vocab:
            # Added tokens inside this range (e.g. <unk>/<s>/</s> at 0-2) are the
            # caller's to exclude: see special_token_ids_from_model_dir.
            cands.append(max(vocab.values()) + 1)
        elif isinstance(vocab, list) and vocab:  # Unigram
            cands.append(len(vocab))
    if not cands:
        raise FileNotFoundError(f"{path}: neither config.json with vocab_size nor tokenizer.json found")
    return min(cands)


def special_token_ids_from_model_dir(path: str | Path) -> list[int]:
    """Ids of the tokenizer's added/special tokens (to pass as `exclude`)."""
    tj = _tokenizer_json(Path(path))
    if tj is None:
        return []
    return sorted({int(t["id"]) for t in tj.get("added_tokens", []) if isinstance(t.get("id"), int)})
