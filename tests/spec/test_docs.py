"""The spec reference (docs/spec.md, `evidence spec --schema`) is generated from the models and up to date."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema  # a test dependency (pyproject [test]): missing, the suite fails rather than skips
import pytest

from evidence.spec.docs import FIELD_DOCS, iter_fields, spec_reference_md, spec_schema
from evidence.spec.yamlsrc import read_yaml

ROOT = Path(__file__).resolve().parents[2]


def test_docs_spec_md_is_up_to_date():
    assert (ROOT / "docs" / "spec.md").read_text(encoding="utf-8") == spec_reference_md(), \
        "docs/spec.md is stale: run `evidence spec --write docs/spec.md`"


def test_every_field_has_a_meaning_and_a_unit_entry():
    paths = [p for p, *_ in iter_fields()]
    assert sorted(set(paths) - set(FIELD_DOCS)) == [], "fields without an entry in evidence/spec/docs.py FIELD_DOCS"
    assert sorted(set(FIELD_DOCS) - set(paths)) == [], "FIELD_DOCS entries that name no field"
    bare = [p for p, _, _, f in iter_fields() if not (f.description or FIELD_DOCS[p][1])]
    assert bare == [], "fields with no meaning"
    both = [p for p, _, _, f in iter_fields() if f.description and FIELD_DOCS[p][1]]
    assert both == [], "a meaning in two places (Field description and FIELD_DOCS)"
    timed = [p for p in paths if p.endswith("_s") and FIELD_DOCS[p][0] != "seconds"]
    assert timed == []


def test_reference_lists_every_field_with_default_and_unit():
    md = spec_reference_md()
    for path, *_ in iter_fields():
        assert f"`{path}`" in md or f"## `{path}`" in md
    assert "| `workload.request_timeout_s` | number >0 <=86,400 | 600.0 | seconds |" in md
    # no single default: it depends on the repeats, the arms and the engine (evidence.spec.design)
    assert "| `sweep.sessions` | integer >=1 <=64 | by design (see meaning) | server starts |" in md


@pytest.mark.parametrize("spec", sorted((ROOT / "specs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_specs_satisfy_the_schema(spec):
    data = read_yaml(spec).data
    jsonschema.validate(json.loads(json.dumps(data)), spec_schema())


def test_schema_refuses_what_validate_refuses():
    data = json.loads(json.dumps(read_yaml(ROOT / "specs" / "demo-cpu.yaml").data))
    data["sweep"]["repeets"] = 3
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, spec_schema())


def test_cli_spec_schema_and_markdown():
    r = subprocess.run([sys.executable, "-m", "evidence.cli", "spec", "--schema"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and json.loads(r.stdout) == json.loads(json.dumps(spec_schema()))
    assert json.loads(r.stdout)["properties"]["engine"]["$ref"] == "#/$defs/Engine"
    r = subprocess.run([sys.executable, "-m", "evidence.cli", "spec", "--markdown"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout == spec_reference_md()
    r = subprocess.run([sys.executable, "-m", "evidence.cli", "spec"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--schema" in r.stderr
