"""One behaviour suite run against every registered engine adapter (no server is started): what the
other stages ask the adapter instead of comparing engine.kind, and the protocol the runner drives.
A new adapter (e.g. SGLang, docs/sglang-adapter.md) is added to the registry and passes this suite."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT
from evidence.engines import ADAPTERS, Engine, EngineError, adapter_class, make_engine
from evidence.engines.base import free_port
from evidence.run.provenance.pins import refusal_message
from evidence.spec.model import Spec, load_spec

KINDS = sorted(ADAPTERS)


def spec_of(kind: str) -> Spec:
    """The demo spec, as that kind: an endpoint points at a port where nothing listens."""
    d = load_spec(ROOT / "specs" / "demo-cpu.yaml").model_dump()
    d["engine"] = {
        "kind": kind,
        "version": "0.32.0",
        **({"base_url": f"http://127.0.0.1:{free_port()}"} if kind == "endpoint" else {}),
    }
    return Spec.model_validate(d)


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    return request.param


def test_every_spec_kind_has_an_adapter() -> None:
    from typing import get_args

    from evidence.spec.model import Engine as EngineSpec

    assert set(get_args(EngineSpec.model_fields["kind"].annotation)) == set(ADAPTERS)


def test_capabilities_are_declared(kind: str) -> None:
    cls = adapter_class(kind)
    assert cls.kind == kind
    for cap in ("local_process", "can_profile", "engine_python"):
        assert isinstance(getattr(cls, cap), bool), f"{kind}: {cap} is not declared"
    # the series it names feed the engine-neutral columns the analysis reads
    from evidence.analysis.telemetry import GAUGES

    columns = {c for c, _ in GAUGES} | {"generation_tokens_total", "prompt_tokens_total", "num_preemptions_total"}
    assert cls.telemetry_series and set(cls.telemetry_series.values()) <= columns, cls.telemetry_series
    # a server someone else runs can neither be profiled from here nor its Python probed
    if not cls.local_process:
        assert not cls.can_profile and not cls.engine_python


def test_the_spec_and_the_adapter_agree_on_who_starts_the_server(kind: str) -> None:
    assert spec_of(kind).engine.starts_server == adapter_class(kind).local_process


def test_an_adapter_follows_the_protocol_before_any_start(kind: str, tmp_path: Path) -> None:
    spec = spec_of(kind)
    e = make_engine(spec, ROOT, port=free_port())
    assert isinstance(e, Engine) and e.kind == kind
    cmd = e.command()
    assert all(isinstance(a, str) for a in cmd)
    assert bool(cmd) == e.local_process  # only a server this tool starts has a command line
    d = e.describe()
    assert d["kind"] == kind
    assert e.alive() is False  # nothing listens yet
    e.stop()  # stopping what never started is a no-op, twice
    e.stop()
    with e:
        pass


def test_provenance_probe(kind: str) -> None:
    probe = adapter_class(kind).provenance_probe(spec_of(kind), ROOT)
    if adapter_class(kind).engine_python:
        assert probe is not None and isinstance(probe.probe_env(), dict)
    else:
        assert probe is None


def test_a_refused_version_pin_says_how_it_was_probed_and_what_to_do(kind: str) -> None:
    spec = spec_of(kind)
    probed, fix = adapter_class(kind).version_pin_hint(
        spec, {"engine": {}}, {"pin": "engine version", "requested": "0.32.0"}
    )
    assert probed.startswith("probed") and fix
    pin = {"pin": "engine version", "requested": "0.32.0", "effective": "0.1.0", "ok": False}
    msg = refusal_message(spec, {"engine": {}}, [pin], Path("provenance.json"))
    assert probed in msg and fix in msg


def test_an_unknown_kind_is_one_paragraph() -> None:
    with pytest.raises(EngineError) as e:
        adapter_class("sglang")
    assert "no engine adapter for engine.kind 'sglang'; known: " + ", ".join(KINDS) == str(e.value)


def test_no_engine_kind_comparison_outside_the_adapters() -> None:
    """Engine knowledge lives behind the adapter: callers ask it (local_process, can_profile, ...)."""
    pkg = ROOT / "evidence"
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted(pkg.rglob("*.py"))
        if "engines" not in p.parts
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"engine\.kind\s*[!=]=", line)
    ]
    assert not hits, hits


def test_the_profiler_hook(kind: str, tmp_path: Path) -> None:
    cls = adapter_class(kind)
    spec = spec_of(kind)
    if not cls.can_profile:
        with pytest.raises(EngineError):
            cls.profile_spec(spec, tmp_path)
        return
    d = spec.model_dump()
    p0 = spec.sweep.points[0]
    d["profile"] = {"enabled": True, "tool": "torch", "points": [p0], "prompts": {p0: 4}}
    pspec, extra = cls.profile_spec(Spec.model_validate(d), tmp_path)
    assert isinstance(pspec, Spec) and extra and all(isinstance(a, str) for a in extra)
    assert str(tmp_path.resolve()) in " ".join(extra)  # the traces land where the run asked
