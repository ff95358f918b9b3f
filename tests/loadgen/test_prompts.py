"""Prompts: exact lengths, seeded determinism (across processes), server-side length checks."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys

import aiohttp
import pytest

from evidence.loadgen.prompts import (
    Prompt,
    make_text_prompts,
    make_token_prompts,
    special_token_ids_from_model_dir,
    vocab_size_from_model_dir,
)
from evidence.tools.standin import StandinServer


def digest(ps: list[Prompt]) -> str:
    return hashlib.sha256(json.dumps([p.as_dict() for p in ps], sort_keys=True).encode()).hexdigest()


def test_token_prompts_exact_length_and_range():
    ps = make_token_prompts(50, 128, 32, seed=1, vocab_size=1000, reserved_low=10)
    assert len(ps) == 50
    for k, p in enumerate(ps):
        assert p.i == k and p.text is None
        assert len(p.token_ids) == p.prompt_len == 128
        assert p.max_tokens == 32
        assert all(10 <= t < 1000 for t in p.token_ids)
        assert p.payload_prompt is p.token_ids
    # distinct prompts (no shared prefixes that prefix caching could exploit)
    assert len({tuple(p.token_ids[:8]) for p in ps}) == 50


def test_token_prompts_deterministic_and_seeded():
    a = make_token_prompts(20, 64, 8, seed=42, vocab_size=5000)
    assert digest(a) == digest(make_token_prompts(20, 64, 8, seed=42, vocab_size=5000))
    assert digest(a) != digest(make_token_prompts(20, 64, 8, seed=43, vocab_size=5000))
    # prompt i does not depend on how many prompts are made
    assert make_token_prompts(5, 64, 8, seed=42, vocab_size=5000)[3].token_ids == a[3].token_ids


def test_token_prompts_same_in_another_process():
    code = ("import hashlib,json;from evidence.loadgen.prompts import make_token_prompts as m;"
            "ps=m(20,64,8,seed=42,vocab_size=5000,range_ratio=0.3);"
            "print(hashlib.sha256(json.dumps([p.as_dict() for p in ps],sort_keys=True).encode()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""}, cwd=".")
    here = digest(make_token_prompts(20, 64, 8, seed=42, vocab_size=5000, range_ratio=0.3))
    assert out.stdout.strip() == here


def test_range_ratio_lengths():
    ps = make_token_prompts(200, 100, 50, seed=3, vocab_size=5000, range_ratio=0.2)
    ins = [p.prompt_len for p in ps]
    outs = [p.max_tokens for p in ps]
    assert all(80 <= x <= 120 for x in ins) and all(40 <= x <= 60 for x in outs)
    assert all(len(p.token_ids) == p.prompt_len for p in ps)
    assert len(set(ins)) > 20  # they vary
    assert 95 <= sum(ins) / len(ins) <= 105


def test_exclude_ids():
    ps = make_token_prompts(10, 200, 4, seed=1, vocab_size=40, reserved_low=0, exclude=range(0, 30))
    assert all(30 <= t < 40 for p in ps for t in p.token_ids)


def test_bad_arguments():
    with pytest.raises(ValueError):
        make_token_prompts(1, 0, 4, seed=1, vocab_size=100)
    with pytest.raises(ValueError):
        make_token_prompts(1, 4, 4, seed=1, vocab_size=10, reserved_low=16)
    with pytest.raises(ValueError):
        make_token_prompts(1, 4, 4, seed=1, vocab_size=100, range_ratio=1.0)


async def _text_prompts(url, **kw):
    async with aiohttp.ClientSession() as s:
        ps = await make_text_prompts(s, url, "standin", **kw)
        # check independently with the server's own count
        counts = []
        for p in ps:
            async with s.post(url + "/tokenize", json={"prompt": p.text, "add_special_tokens": True}) as r:
                counts.append((await r.json())["count"])
        return ps, counts


def test_text_prompts_match_server_count_despite_round_trip_drift():
    # quirk=5: numbers >= 10 that are multiples of 5 tokenize as two or more pieces, and a
    # digit piece merges into the word before it; bos: the server adds one special token
    with StandinServer(bos=True, quirk=5, vocab=1000) as url:
        ps, counts = asyncio.run(_text_prompts(url, n=12, input_len=64, output_len=8, seed=9, vocab_size=1000))
        again, _ = asyncio.run(_text_prompts(url, n=12, input_len=64, output_len=8, seed=9, vocab_size=1000))
    assert counts == [64] * 12
    for p in ps:
        assert p.token_ids is None and isinstance(p.text, str)
        assert p.prompt_len == p.seen_len == p.target_len == 64 and p.mismatch == 0
        assert p.max_tokens == 8
    assert max(p.rounds for p in ps) >= 2  # the drift was real and got corrected
    assert [p.text for p in ps] == [p.text for p in again]


def test_text_prompts_report_non_convergence():
    # quirk=1 splits almost every word; one round is not enough to fix that
    with StandinServer(quirk=1, vocab=1000) as url:
        ps, counts = asyncio.run(_text_prompts(url, n=2, input_len=20, output_len=4, seed=1, vocab_size=1000,
                                               max_rounds=1))
    for p, c in zip(ps, counts):
        assert p.seen_len == c == p.prompt_len and p.mismatch > 0 and p.rounds == 1
        assert p.target_len == 20


def test_standin_tokenizer_round_trip():
    from evidence.tools.standin import Options, detokenize, tokenize
    o = Options(quirk=5)
    assert tokenize(detokenize([30]), o) == [3, 4]  # " w30" -> " w3" + digit "0" (id 4): longer
    assert detokenize([3, 4]) == " w30"
    assert tokenize(detokenize([3, 3]), o) == [3, 3]
    assert tokenize(detokenize([33, 4 + 3]), o) == [333]  # " w33" + digit "3" merges: shorter
    assert tokenize(detokenize([500]), o) == [5, 4, 4]  # recursive: " w5" "0" "0"


def test_vocab_size_from_model_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 1024}))
    assert vocab_size_from_model_dir(tmp_path) == 1024
    tok = {"model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(1000)}},
           "added_tokens": [{"id": 1000, "content": "<|endoftext|>"}, {"id": 1001, "content": "<|im_start|>"}]}
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok))
    assert vocab_size_from_model_dir(tmp_path) == 1000  # padded embedding rows and added tokens excluded
    assert special_token_ids_from_model_dir(tmp_path) == [1000, 1001]
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 900}))
    assert vocab_size_from_model_dir(tmp_path) == 900
    with pytest.raises(FileNotFoundError):
        vocab_size_from_model_dir(tmp_path / "nothing")
