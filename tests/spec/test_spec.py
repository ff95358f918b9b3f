"""The spec: shipped specs load; every kind of bad input gives a located message."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evidence.spec.model import SpecError, load_spec, spec_from_json, spec_to_json
from evidence.spec.yamlsrc import parse_yaml

ROOT = Path(__file__).resolve().parents[2]
ARTICLE = ROOT / "specs" / "article1.yaml"


def problems(tmp_path: Path, text: str) -> list[tuple[int | None, str, str]]:
    p = tmp_path / "s.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    return [(pos.line if pos else None, field, msg) for pos, field, msg in ei.value.problems]


def article_with(old: str, new: str) -> str:
    text = ARTICLE.read_text(encoding="utf-8")
    assert old in text, old
    return text.replace(old, new, 1)


def line_of(text: str, needle: str) -> int:
    return next(i for i, l in enumerate(text.splitlines(), 1) if needle in l)


@pytest.mark.parametrize("name", ["article1.yaml", "demo-cpu.yaml"])
def test_shipped_specs_load(name):
    s = load_spec(ROOT / "specs" / name)
    assert s.trial_count == len(s.sweep.points) * s.sweep.repeats
    assert spec_from_json(spec_to_json(s)) == s


def test_article_values():
    s = load_spec(ARTICLE)
    assert s.hardware.accelerator == "NVIDIA A100-SXM4-80GB" and s.hardware.count == 1
    assert s.engine.version == "0.27.1"
    a = s.engine.args
    assert (a.dtype, a.max_model_len, a.gpu_memory_utilization) == ("bfloat16", 8192, 0.5)
    assert a.enable_prefix_caching is False and a.enable_chunked_prefill is True
    assert s.model.revision == "aa8e72537993ba99e69dfaafa59ed015b17504d1"
    # The article's experiment commit is provenance, not a pin this repository could never satisfy.
    assert s.code.commit is None and s.code.article_commit == "1d721051945defd8898916a986fc696286e7946d"
    assert s.code.allow_dirty is False
    # vllm bench serve sends repetition_penalty 1.0 in every request; the article's client did.
    assert s.workload.extra_body == {"repetition_penalty": 1.0} and s.workload.temperature is None
    assert (s.workload.input_len, s.workload.output_len, s.workload.request_rate) == (512, 128, "inf")
    assert s.sweep.points == [64, 128, 256]
    assert [s.sweep.prompts_at(p) for p in s.sweep.points] == [512, 1024, 2048]
    assert (s.sweep.repeats, s.sweep.order) == (3, "balanced")
    assert s.profile.enabled and s.profile.tool == "nsys" and s.profile.layers == 36
    assert s.total_prompts == 3 * (512 + 1024 + 2048)


def test_unknown_key_suggests_closest(tmp_path):
    text = article_with("  repeats: 3", "  repeets: 3")
    ps = problems(tmp_path, text)
    assert (line_of(text, "repeets"), "sweep.repeets", "unknown key 'repeets'; did you mean 'repeats'?") in ps


def test_wrong_type_is_located(tmp_path):
    text = article_with("input_len: 512 ", 'input_len: "512" ')
    ps = problems(tmp_path, text)
    assert any(l == line_of(text, "input_len") and f == "workload.input_len" and "valid integer" in m for l, f, m in ps)


def test_union_fields_give_one_clear_message(tmp_path):
    text = article_with("request_rate: inf", "request_rate: fast").replace(
        "prompts: {64: 512, 128: 1024, 256: 2048}", "prompts: {per_concurency: 4}")
    ps = problems(tmp_path, text)
    rate = [m for _, f, m in ps if f == "workload.request_rate"]
    assert rate == ["request_rate is 'inf' (every request due at once: a saturation sweep) or a number of requests "
                    "per second greater than 0 (got 'fast')"]
    prompts = {(f, m) for _, f, m in ps if f.startswith("sweep.prompts")}
    assert prompts == {("sweep.prompts.per_concurrency", "required field is missing"),
                       ("sweep.prompts.per_concurency", "unknown key 'per_concurency'; did you mean 'per_concurrency'?")}


def test_duplicate_key_is_an_error_with_both_lines(tmp_path):
    text = article_with("  output_len: 128", "  output_len: 128\n  output_len: 64")
    ps = problems(tmp_path, text)
    first = line_of(text, "output_len: 128")
    assert (first + 1, "workload.output_len", f"duplicate key 'output_len' (first defined at line {first}); a YAML loader would silently keep the last one") in ps


def test_all_errors_at_once(tmp_path):
    text = article_with("  repeats: 3", "  repeets: 3").replace("output_len: 128", "output_len: -1").replace("dtype: bfloat16", "dtype: bf17")
    fields = {f for _, f, _ in problems(tmp_path, text)}
    assert {"sweep.repeets", "workload.output_len", "engine.args.dtype"} <= fields


@pytest.mark.parametrize(
    "old,new,field,fragment",
    [
        ("points: [64, 128, 256]", "points: [128, 64, 256]", "sweep.points", "ascending"),
        ("points: [64, 128, 256]", "points: [64, 64, 256]", "sweep.points", "unique"),
        ("points: [64, 128, 256]", "points: [0, 128, 256]", "sweep.points[0]", "greater than 0"),
        ("prompts: {64: 512, 128: 1024, 256: 2048}", "prompts: {64: 512, 128: 1024}", "sweep.prompts", "no prompt count for point(s) [256]"),
        ("article_commit: 1d721051945defd8898916a986fc696286e7946d", "article_commit: 1d72105", "code.article_commit", "40 lowercase hex"),
        ("  allow_dirty: false", "  allow_dirty: false\n  commit: 1d72105", "code.commit", "40 lowercase hex"),
        ("revision: aa8e72537993ba99e69dfaafa59ed015b17504d1", "revision: main", "model.revision", "40 lowercase hex"),
        ("    - {a: 128, b: 256}", "    - {a: 128, b: 512}", "analysis.comparisons[0]", "not sweep points"),
        ("  points: [64, 128, 256]\n  prompts: {64: 256", "  points: [64, 32]\n  prompts: {64: 256", "profile.points", "not sweep points"),
        ("max_model_len: 8192", "max_model_len: 600", "engine.args.max_model_len", "needs 640 tokens"),
        ("gpu_memory_utilization: 0.50", "gpu_memory_utilization: 1.5", "engine.args.gpu_memory_utilization", "less than or equal to 1"),
        ("order: balanced", "order: shuffled", "sweep.order_seed", "needs 'order_seed'"),
        ("request_rate: inf", "request_rate: fast", "workload.request_rate", ""),
        ("kind: vllm", "kind: endpoint", "engine.base_url", "needs 'base_url'"),
    ],
)
def test_cross_field_and_value_rules(tmp_path, old, new, field, fragment):
    text = article_with(old, new)
    ps = problems(tmp_path, text)
    hits = [(l, f, m) for l, f, m in ps if f == field and fragment in m]
    assert hits, ps
    assert all(l is not None for l, _, _ in hits)


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("", "empty"),
        ("# only a comment\n", "empty"),
        ("- a\n- b\n", "holds a list"),
        ("just a string\n", "holds a str"),
        ("name: [unclosed\n", "YAML syntax error"),
        ("a: 1\n---\nb: 2\n", "several YAML documents"),
        ("name: x\n  bad indent: 1\n", "YAML syntax error"),
    ],
)
def test_unreadable_documents(tmp_path, text, fragment):
    ps = problems(tmp_path, text)
    assert any(fragment in m for _, _, m in ps), ps


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="folder"):
        load_spec(tmp_path)


def test_positions_of_nested_values():
    src = parse_yaml("a:\n  b:\n    - 1\n    - {c: 2}\n")
    assert src.where(("a", "b", 1, "c")).line == 4
    assert src.where(("a", "b", 0)).line == 3
    assert src.where(("a", "zz")).line == 1  # falls back to the deepest existing key


def test_cli_validate_exit_codes_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(article_with("  repeats: 3", "  repeets: 3"), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "evidence.cli", "validate", str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr + r.stdout
    assert re.search(r"bad\.yaml:\d+:3: sweep\.repeets: unknown key 'repeets'; did you mean 'repeats'\?", r.stderr)
    ok = subprocess.run([sys.executable, "-m", "evidence.cli", "validate", "--json", str(ARTICLE)], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0 and '"trials": 9' in ok.stdout and '"prompts_total": 10752' in ok.stdout


# ---- property test: random documents never produce anything but SpecError ----

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=True), st.text(max_size=8))
keys = st.sampled_from(["name", "title", "engine", "model", "workload", "sweep", "points", "prompts", "kind", "args",
                        "input_len", "output_len", "seed", "repeats", "order", "profile", "analysis", "a", "b", "id", "x"])
docs = st.recursive(scalars, lambda ch: st.one_of(st.lists(ch, max_size=4), st.dictionaries(keys, ch, max_size=5)), max_leaves=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs)
def test_random_documents_never_traceback(tmp_path_factory, doc):
    import yaml

    p = tmp_path_factory.mktemp("h") / "s.yaml"
    p.write_text(yaml.safe_dump(doc), encoding="utf-8")
    try:
        load_spec(p)
    except SpecError as e:
        assert e.problems and all(isinstance(m, str) and m for _, _, m in e.problems)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_random_text_never_tracebacks(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("t") / "s.yaml"
    p.write_text(text, encoding="utf-8")
    try:
        load_spec(p)
    except SpecError:
        pass


def test_cli_validate_names_the_api_key_variable_never_its_value(tmp_path):
    import json
    import os

    secret = "sk-test-do-not-print-0123456789"
    env = {**os.environ, "VLLM_API_KEY": secret}
    r = subprocess.run([sys.executable, "-m", "evidence.cli", "validate", "--json", str(ARTICLE)],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0 and secret not in r.stdout + r.stderr
    s = json.loads(r.stdout)
    assert (s["api_key_env"], s["api_key_set"]) == ("VLLM_API_KEY", True)
    assert s["extra_body"] == {"repetition_penalty": 1.0} and s["sessions"] == 3 and s["request_timeout_s"] == 600.0
    assert s["article_commit"] == "1d721051945defd8898916a986fc696286e7946d"
    env.pop("VLLM_API_KEY")
    r = subprocess.run([sys.executable, "-m", "evidence.cli", "validate", str(ARTICLE)], capture_output=True, text=True,
                       cwd=ROOT, env=env)
    assert r.returncode == 0 and "$VLLM_API_KEY is not set" in r.stdout and "provenance, not a pin" in r.stdout


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_traceback(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("b") / "s.yaml"
    p.write_bytes(data)
    try:
        load_spec(p)
    except SpecError as e:
        assert e.problems and all(isinstance(m, str) and m for _, _, m in e.problems)
