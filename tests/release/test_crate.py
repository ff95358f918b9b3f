"""The release's RO-Crate (a Process Run Crate over the payload) read back by the rocrate library."""

from __future__ import annotations

from pathlib import Path

from rocrate.rocrate import ROCrate

from evidence.release.crate import PROCESS_RUN_CRATE, crate_json, write_crate
from rundir_fixtures import build_run


def test_crate_reads_back_with_one_action_per_trial(tmp_path: Path) -> None:
    payload = tmp_path / "data"
    run = build_run(payload / "raw", run_id="fx", missing=("r2-c4",))
    write_crate(payload, tag="v1", title="fixture", date_unix=1780000000, runs=["fx"], tool_version="0.1.0")
    crate = ROCrate(payload)
    actions = [e for e in crate.get_entities() if e.type == "CreateAction"]
    present = sorted(p.name for p in (run / "trials").iterdir())
    assert sorted(a["name"].split()[1] for a in actions) == present  # r2-c4 is missing: no action for it
    for a in actions:
        assert {i.id for i in a["instrument"]} == {"#evidence", "#engine-vllm-0.32.0"}
        assert [o.id for o in a["object"]] == ["raw/fx/spec.yaml"]
        for r in a["result"]:
            assert (payload / r.id).is_file()
    conforms = crate.metadata.as_jsonld()["conformsTo"]
    assert {"@id": PROCESS_RUN_CRATE} in conforms
    assert crate.root_dataset["datePublished"].startswith("2026-05-28")


def test_crate_bytes_are_deterministic(tmp_path: Path) -> None:
    payload = tmp_path / "data"
    build_run(payload / "raw", run_id="fx")
    kw = dict(tag="v1", title="fixture", date_unix=1780000000, runs=["fx"], tool_version="0.1.0")
    assert crate_json(payload, **kw) == crate_json(payload, **kw)
