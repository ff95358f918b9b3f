"""Spec bounds (issue 14's held-out cases): hostile or absurd files end in a located SpecError, fast and
with bounded memory; `evidence validate` never tracebacks."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evidence.spec import yamlsrc
from evidence.spec.model import SpecError, load_spec

ROOT = Path(__file__).resolve().parents[2]
ARTICLE = ROOT / "specs" / "article1.yaml"
DEMO = ROOT / "specs" / "demo-cpu.yaml"


def problems_of(path: Path) -> list[tuple[int | None, int | None, str, str]]:
    with pytest.raises(SpecError) as ei:
        load_spec(path)
    return [(p.line if p else None, p.column if p else None, f, m) for p, f, m in ei.value.problems]


def write(tmp_path: Path, data: str | bytes) -> Path:
    p = tmp_path / "s.yaml"
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def article_with(old: str, new: str, base: Path = ARTICLE) -> str:
    text = base.read_text(encoding="utf-8")
    assert old in text, old
    return text.replace(old, new, 1)


BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9 if p else ['lol'] * 9)}]\n"
               for p, c in zip([None] + list("abcdefgh"), "abcdefghi"))


def test_alias_bomb_fails_fast_with_bounded_memory(tmp_path):
    assert len(BOMB) < 2048
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.monotonic()
    ps = problems_of(write(tmp_path, BOMB))
    assert time.monotonic() - t < 5
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) < 200_000  # KiB
    assert len(ps) == 1 and "aliases ('*name') expand to more than 10,000 values" in ps[0][3] and ps[0][0] is not None


def test_small_aliases_are_fine(tmp_path):
    text = article_with("  points: [64, 128, 256]\n  prompts: {64: 512", "  points: &pts [64, 128, 256]\n  prompts: {64: 512")
    text = text.replace("profile:\n  enabled: true\n  tool: nsys\n  points: [64, 128, 256]",
                        "profile:\n  enabled: true\n  tool: nsys\n  points: *pts")
    assert load_spec(write(tmp_path, text)).profile.points == [64, 128, 256]


def test_recursive_alias_is_an_error(tmp_path):
    ps = problems_of(write(tmp_path, "name: x\nlist: &x [1, *x]\n"))
    assert ps == [(2, 7, "", "an alias refers to a value that contains it (a cycle)")]


@pytest.mark.parametrize("style", ["flow", "block"])
def test_deep_nesting_is_refused(tmp_path, style):
    if style == "flow":
        text = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    else:
        text = "".join("  " * i + f"k{i}:\n" for i in range(100)) + "  " * 100 + "v: 1\n"
    ps = problems_of(write(tmp_path, text))
    assert len(ps) == 1 and "nested more than 64 levels deep" in ps[0][3] and ps[0][0] is not None


def test_nesting_within_the_limit_reads(tmp_path):
    src = yamlsrc.parse_yaml("a: " + "[" * 60 + "]" * 60 + "\n")
    assert isinstance(src.data["a"], list)


def test_big_file_refused_at_once_with_its_size(tmp_path):
    p = tmp_path / "big.yaml"
    with open(p, "wb") as f:
        f.write(b"name: x\ndescription: '" + b"a" * 20_000_000 + b"'\n")
    t = time.monotonic()
    ps = problems_of(p)
    assert time.monotonic() - t < 1
    assert ps == [(None, None, "", f"the file is {p.stat().st_size:,} bytes; a spec is at most 4,194,304 bytes "
                                     "(the shipped ones are about 3 KB)")]


def test_too_many_values(tmp_path):
    ps = problems_of(write(tmp_path, "name: x\nl: [" + ",".join(["1"] * 250_000) + "]\n"))
    assert len(ps) == 1 and "more than 200,000 values" in ps[0][3] and ps[0][0] == 2


@pytest.mark.parametrize("data,line,col,fragment", [
    (b"name: x\ntitle: caf\xe9\n", 2, 11, "byte 0xe9, which is not UTF-8"),
    (b"name: x\n\ntitle: a\x00b\n", 3, 9, "a NUL byte"),
    (b"\xff\xfe\x00n", 1, 1, "byte 0xff"),
    (b"name: x\ntitle: a\x01b\n", 2, 9, "character #x0001"),
])
def test_binary_content_has_a_line(tmp_path, data, line, col, fragment):
    ps = problems_of(write(tmp_path, data))
    assert len(ps) == 1 and ps[0][:2] == (line, col) and fragment in ps[0][3], ps


@pytest.mark.parametrize("value,tag", [("!!python/object:os.system {}", "!!python/object:os.system"),
                                       ("!!python/name:os.system ''", "!!python/name:os.system"),
                                       ("!custom 3", "!custom"), ("!!binary aGVsbG8=", "!!binary"),
                                       ("!!set {a: null}", "!!set"), ("!!omap [{a: 1}]", "!!omap")])
def test_unknown_tags_are_errors(tmp_path, value, tag):
    text = article_with('title: "vLLM concurrency knee on one A100: C64 vs C128 vs C256"', f"title: {value}")
    ps = problems_of(write(tmp_path, text))
    assert [(f, m.split(" is not")[0]) for _, _, f, m in ps] == [("title", f"YAML tag '{tag}'")]
    assert ps[0][0] == 4


def test_plain_explicit_tags_are_fine(tmp_path):
    text = article_with('title: "vLLM concurrency knee on one A100: C64 vs C128 vs C256"', "title: !!str 123")
    assert load_spec(write(tmp_path, text)).title == "123"


@pytest.mark.parametrize("old,new,field", [
    ("  cooldown_s: 10", "  cooldown_s: .inf", "sweep.cooldown_s"),
    ("  readiness_timeout_s: 900", "  readiness_timeout_s: .inf", "engine.readiness_timeout_s"),
    ("  request_rate: inf", "  request_rate: 2.0\n  burstiness: .inf", "workload.burstiness"),
    ("  temperature: null", "  temperature: .inf", "workload.temperature"),
    ("  temperature: null", "  temperature: .nan", "workload.temperature"),
    ("  cooldown_s: 10", "  cooldown_s: .nan", "sweep.cooldown_s"),
    ("gpu_memory_utilization: 0.50", "gpu_memory_utilization: .nan", "engine.args.gpu_memory_utilization"),
    ("  percentiles: [50, 99]", "  percentiles: [50, .inf]", "analysis.percentiles[1]"),
    ("  cv: population", "  cv: population\n  slos_ms: {ttft: .inf}", "analysis.slos_ms.ttft"),
])
def test_non_finite_numbers_refused(tmp_path, old, new, field):
    ps = problems_of(write(tmp_path, article_with(old, new)))
    assert [(f, "finite" in m) for _, _, f, m in ps] == [(field, True)], ps
    assert ps[0][0] is not None


def test_request_rate_keeps_inf_spelling(tmp_path):
    assert load_spec(ARTICLE).workload.request_rate == "inf"
    ps = problems_of(write(tmp_path, article_with("  request_rate: inf", "  request_rate: .inf")))
    assert [f for _, _, f, _ in ps] == ["workload.request_rate"]


@pytest.mark.parametrize("old,new,field,fragment", [
    ("  repeats: 3", "  repeats: 100000000000", "sweep.repeats", "less than or equal to 10000"),
    ("  repeats: 3", "  repeats: 5000", "sweep.repeats", "15,000 trials; a run holds at most 10,000"),
    ("prompts: {64: 512, 128: 1024, 256: 2048}", "prompts: {64: 512, 128: 1024, 256: 2000000}",
     "sweep.prompts[256]", "less than or equal to 1000000"),
    ("prompts: {64: 512, 128: 1024, 256: 2048}", "prompts: {per_concurrency: 5000}", "sweep.prompts",
     "more than 1,000,000 prompts in one trial at point(s) [256]"),
    ("points: [64, 128, 256]\n  prompts: {64: 512", "points: [64, 128, 1000000]\n  prompts: {64: 512",
     "sweep.points[2]", "less than or equal to 100000"),
    ("    requests: 256", "    requests: 99999999999", "sweep.warmup.requests", "less than or equal to 1000000"),
    ("  output_len: 128", "  output_len: 100000000000", "workload.output_len", "less than or equal to 10000000"),
    ("  count: 1", "  count: 100000", "hardware.count", "less than or equal to 4096"),
    ("    tensor_parallel_size: 1", "    tensor_parallel_size: 2", "engine.args.tensor_parallel_size",
     "need 2 accelerators but hardware.count is 1"),
    ("    data_parallel_size: 1", "    data_parallel_size: 100000", "engine.args.data_parallel_size",
     "less than or equal to 1024"),
    ("    enable_chunked_prefill: true", "    enable_chunked_prefill: true\n    seed: -1", "engine.args.seed",
     "greater than or equal to 0"),
])
def test_counts_no_run_could_hold(tmp_path, old, new, field, fragment):
    ps = problems_of(write(tmp_path, article_with(old, new)))
    hits = [(l, f, m) for l, _, f, m in ps if f == field and fragment in m]
    assert hits and all(l is not None for l, _, _ in hits), ps


def test_prompts_per_run_bound(tmp_path):
    text = article_with("prompts: {64: 512, 128: 1024, 256: 2048}", "prompts: {64: 1000000, 128: 1000000, 256: 1000000}")
    ps = problems_of(write(tmp_path, text.replace("  repeats: 3", "  repeats: 40")))
    assert [(f, "more than 100,000,000 prompts" in m) for _, _, f, m in ps] == [("sweep.prompts", True)]


def test_parallel_sizes_fit_the_accelerators(tmp_path):
    text = article_with("  count: 1", "  count: 4").replace("tensor_parallel_size: 1", "tensor_parallel_size: 2").replace(
        "pipeline_parallel_size: 1", "pipeline_parallel_size: 2")
    assert load_spec(write(tmp_path, text)).engine.args.tensor_parallel_size == 2
    ps = problems_of(write(tmp_path, text.replace("data_parallel_size: 1", "data_parallel_size: 2")))
    assert [f for _, _, f, _ in ps] == ["engine.args.tensor_parallel_size"] and "need 8 accelerators" in ps[0][3]


# ---- property tests: hostile bytes and shapes never produce anything but SpecError ----

fragments = st.sampled_from(["&a ", "*a", "!!python/object ", "!x ", "[", "]", "{", "}", ": ", "- ", "\n", "  ", ".inf",
                             ".nan", "1e999", "99999999999999999999", "\x00", "\xff", "'", '"', "<<: *a", "---\n", "%YAML 1.1\n"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(fragments, max_size=30), st.binary(max_size=20))
def test_hostile_fragments_never_traceback(tmp_path, parts, noise):
    p = tmp_path / "h.yaml"
    p.write_bytes("".join(parts).encode("utf-8", "surrogatepass") + noise)
    try:
        load_spec(p)
    except SpecError as e:
        assert e.problems and all(isinstance(m, str) and m for _, _, m in e.problems)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["  repeats: 3", "  cooldown_s: 10", "  output_len: 128", "  count: 1", "  seed: 0",
                        "    tensor_parallel_size: 1", "    requests: 256", "  readiness_timeout_s: 900"]),
       st.one_of(st.integers(min_value=-(10**30), max_value=10**30), st.floats(), st.text(max_size=5)))
def test_any_value_in_any_numeric_field_is_a_clean_error(tmp_path, line, value):
    import json

    key = line.split(":")[0]
    text = article_with(line, f"{key}: {json.dumps(value) if not isinstance(value, float) else repr(value)}")
    try:
        load_spec(write(tmp_path, text))
    except SpecError as e:
        assert all(p is not None for p, _, _ in e.problems)


@pytest.mark.parametrize("name", ["bomb", "deep", "tag", "nul", "big"])
def test_cli_validate_never_tracebacks_on_hostile_files(tmp_path, name):
    data = {"bomb": BOMB.encode(), "deep": b"a: " + b"[" * 5000 + b"]" * 5000, "tag": b"name: !!python/object:x {}\n",
            "nul": b"name: x\x00\n", "big": b"#" * (5 * 1024 * 1024)}[name]
    p = tmp_path / f"{name}.yaml"
    p.write_bytes(data)
    r = subprocess.run([sys.executable, "-m", "evidence.cli", "validate", str(p)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    assert f"{name}.yaml" in r.stderr
    j = subprocess.run([sys.executable, "-m", "evidence.cli", "validate", "--json", str(p)], capture_output=True, text=True, cwd=ROOT)
    assert j.returncode == 2 and '"ok": false' in j.stdout
