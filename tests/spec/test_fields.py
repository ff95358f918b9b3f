"""The fields other stages read (INTERFACES.md): API key variable, extra request fields, request timeout,
sessions, the article's own commit. Each rule is checked by a spec that breaks it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidence.spec.model import SpecError, load_spec, spec_from_json, spec_to_json

ROOT = Path(__file__).resolve().parents[2]
ARTICLE = ROOT / "specs" / "article1.yaml"
DEMO = ROOT / "specs" / "demo-cpu.yaml"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def problems(tmp_path: Path, text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(SpecError) as ei:
        load_spec(write(tmp_path, text))
    return [(pos.line if pos else None, field, msg) for pos, field, msg in ei.value.problems]


def article_with(old: str, new: str) -> str:
    text = ARTICLE.read_text(encoding="utf-8")
    assert old in text, old
    return text.replace(old, new, 1)


def test_defaults():
    s = load_spec(ARTICLE)
    assert s.engine.api_key_env is None and s.engine.api_key_env_name() == "VLLM_API_KEY"
    assert load_spec(DEMO).workload.extra_body == {} and s.workload.request_timeout_s == 600.0
    # article1.yaml gives repeats 3 and no sessions: one server start per repeat (evidence.spec.design)
    assert (s.sweep.repeats, s.sweep.sessions) == (3, 3)


def test_api_key_env_per_kind_and_named(tmp_path):
    text = article_with("  kind: vllm\n", "  kind: endpoint\n  base_url: http://h:8000\n")
    assert load_spec(write(tmp_path, text)).engine.api_key_env_name() == "OPENAI_API_KEY"
    named = article_with("  readiness_timeout_s: 900", "  readiness_timeout_s: 900\n  api_key_env: MY_KEY")
    assert load_spec(write(tmp_path, named)).engine.api_key_env_name() == "MY_KEY"


def test_api_key_itself_is_refused_and_never_echoed(tmp_path):
    secret = "sk-proj-abcdef123456"
    text = article_with("  readiness_timeout_s: 900", f"  readiness_timeout_s: 900\n  api_key_env: {secret}")
    ps = problems(tmp_path, text)
    assert [f for _, f, _ in ps] == ["engine.api_key_env"]
    assert all(secret not in m for _, _, m in ps)
    text = article_with("  readiness_timeout_s: 900", f"  readiness_timeout_s: 900\n  env: {{VLLM_API_KEY: {secret}}}")
    ps = problems(tmp_path, text)
    assert [f for _, f, _ in ps] == ["engine.env.VLLM_API_KEY"] and secret not in ps[0][2]
    assert "from the environment" in ps[0][2]


def test_extra_body_json_values(tmp_path):
    body = '{repetition_penalty: 1.0, stop: ["</s>"], logit_bias: {"50256": -100}, seed: null}'
    s = load_spec(write(tmp_path, article_with("  extra_body: {repetition_penalty: 1.0}", f"  extra_body: {body}")))
    assert s.workload.extra_body == {"repetition_penalty": 1.0, "stop": ["</s>"], "logit_bias": {"50256": -100}, "seed": None}
    assert spec_from_json(spec_to_json(s)) == s


@pytest.mark.parametrize("key,hint", [("model", "model.served_name"), ("prompt", "workload.input_len"),
                                      ("max_tokens", "workload.output_len"), ("stream", "always streams"),
                                      ("stream_options", "usage"), ("ignore_eos", "workload.ignore_eos"),
                                      ("temperature", "workload.temperature")])
def test_extra_body_refuses_fields_the_client_sets(tmp_path, key, hint):
    ps = problems(tmp_path, article_with("  extra_body: {repetition_penalty: 1.0}", f"  extra_body: {{{key}: 1}}"))
    assert len(ps) == 1 and ps[0][1] == "workload.extra_body" and f"'{key}' is set by the client" in ps[0][2]
    assert hint in ps[0][2]


@pytest.mark.parametrize("value,fragment", [(".inf", "not a JSON number"), ("[1, .nan]", "extra_body.x[1]"),
                                            ("2024-01-01", "quote it"), ("{1: 2}", "not a string")])
def test_extra_body_refuses_non_json(tmp_path, value, fragment):
    ps = problems(tmp_path, article_with("  extra_body: {repetition_penalty: 1.0}", f"  extra_body: {{x: {value}}}"))
    assert [f for _, f, _ in ps] == ["workload.extra_body"] and fragment in ps[0][2], ps


@pytest.mark.parametrize("value,fragment", [("0", "greater than 0"), ("86401", "less than or equal to 86400"),
                                            (".inf", "finite"), (".nan", "finite"), ('"10"', "valid number")])
def test_request_timeout_bounds(tmp_path, value, fragment):
    ps = problems(tmp_path, article_with("  temperature: null", f"  temperature: null\n  request_timeout_s: {value}"))
    assert [f for _, f, _ in ps] == ["workload.request_timeout_s"] and fragment in ps[0][2], ps


@pytest.mark.parametrize("value,fragment", [("0", "greater than or equal to 1"), ("65", "less than or equal to 64"),
                                            ("4", "need at least as many repeats (repeats is 3)")])
def test_sessions_bounds(tmp_path, value, fragment):
    ps = problems(tmp_path, article_with("  repeats: 3", f"  repeats: 3\n  sessions: {value}"))
    assert [f for _, f, _ in ps] == ["sweep.sessions"] and fragment in ps[0][2], ps
    assert load_spec(write(tmp_path, article_with("  repeats: 3", "  repeats: 3\n  sessions: 3"))).sweep.sessions == 3


def test_article_commit_is_forty_hex(tmp_path):
    ps = problems(tmp_path, article_with("article_commit: 1d721051945defd8898916a986fc696286e7946d", "article_commit: 1d72105"))
    assert [f for _, f, _ in ps] == ["code.article_commit"] and "40 lowercase hex" in ps[0][2]


@pytest.mark.parametrize("path", [ARTICLE, DEMO])
def test_resolved_json_without_the_new_fields_still_loads(path):
    """Runs recorded before these fields existed store spec.resolved.json without them."""
    s = load_spec(path)
    d = json.loads(spec_to_json(s))
    for section, key in [("engine", "api_key_env"), ("workload", "extra_body"), ("workload", "request_timeout_s"),
                         ("sweep", "sessions"), ("code", "article_commit")]:
        d[section].pop(key)
    old = spec_from_json(json.dumps(d))
    # a run stored before sweep.sessions existed ran one server start, whatever today's default design
    assert old.sweep.sessions == 1 and old.workload.extra_body == {} and old.code.article_commit is None
    assert old.engine.api_key_env is None and old.workload.request_timeout_s == 600.0
    one = s.sweep.model_copy(update={"sessions": 1})
    assert old.model_copy(update={"workload": s.workload, "code": s.code, "sweep": one}) == s.model_copy(update={"sweep": one})


def test_committed_release_spec_loads():
    import json

    found = 0
    for p in sorted((ROOT / "releases").glob("*/data/raw/*/spec.resolved.json")):
        s = spec_from_json(p.read_text(encoding="utf-8"))
        stored = json.loads(p.read_text(encoding="utf-8"))
        if "sessions" not in stored["sweep"]:  # written before the field existed: the defaults fill it
            found += 1
            assert s.sweep.sessions == 1 and s.workload.extra_body == {}
        else:
            assert s.sweep.sessions == stored["sweep"]["sessions"]
    assert found >= 2  # article1-h200-v1.0's two runs
