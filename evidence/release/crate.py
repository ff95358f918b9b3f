"""RO-Crate metadata of a release: what research-data repositories read beside BagIt's manifests.

The crate is a Process Run Crate (https://w3id.org/ro/wfrun/process/0.5): the payload folder
`data/` is the crate root (RO-Crate's rule for BagIt), every trial of every run is one
CreateAction whose instruments are the engine and the client, whose object is the run's spec,
and whose results are the trial's record files. Entities are built with the `rocrate` library;
the JSON is written with sorted keys and a date from SOURCE_DATE_EPOCH, so the same release
gives the same bytes.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Iterable

from rocrate.model.contextentity import ContextEntity
from rocrate.model.softwareapplication import SoftwareApplication
from rocrate.rocrate import ROCrate

from evidence.canon import dumps
from evidence.rundir import META, PROVENANCE_JSON, SPEC_RESOLVED, SUMMARY, TRIALS

PROCESS_RUN_CRATE = "https://w3id.org/ro/wfrun/process/0.5"
CRATE_NAME = "ro-crate-metadata.json"


def _iso(unix: float | None) -> str | None:
    if unix is None:
        return None
    return _dt.datetime.fromtimestamp(float(unix), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _read_json(p: Path) -> dict:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def crate_json(payload: Path, *, tag: str, title: str, date_unix: int, runs: Iterable[str],
               tool_version: str) -> str:
    """The ro-crate-metadata.json text for the payload folder of a release (`data/`)."""
    crate = ROCrate()
    root = crate.root_dataset
    root["name"] = title
    root["description"] = f"evidence release {tag}: raw records, derived tables, figures and report"
    root["datePublished"] = _iso(date_unix)
    root["license"] = "https://spdx.org/licenses/CC-BY-4.0"
    crate.metadata["conformsTo"] = [{"@id": "https://w3id.org/ro/crate/1.1"}, {"@id": PROCESS_RUN_CRATE}]
    client = crate.add(SoftwareApplication(crate, "#evidence", properties={
        "name": "evidence (load generator and analysis)", "softwareVersion": tool_version}))
    engines: dict[str, SoftwareApplication] = {}
    for run in sorted(runs):
        raw = payload / "raw" / run
        spec = _read_json(raw / SPEC_RESOLVED)
        prov = _read_json(raw / PROVENANCE_JSON)
        eng = prov.get("engine") or {}
        key = f"#engine-{eng.get('kind', 'unknown')}-{eng.get('version', 'unknown')}"
        if key not in engines:
            engines[key] = crate.add(SoftwareApplication(crate, key, properties={
                "name": f"{eng.get('kind', 'engine')} serving engine",
                "softwareVersion": str(eng.get("version", "unknown"))}))
        spec_file = crate.add_file(dest_path=f"raw/{run}/spec.yaml", properties={
            "name": f"experiment spec of run {run}", "encodingFormat": "application/yaml"})
        for d in sorted((raw / TRIALS).glob("*/")):
            if not (d / SUMMARY).is_file():
                continue
            meta = _read_json(d / META)
            results = [crate.add_file(dest_path=f"raw/{run}/trials/{d.name}/{f.name}")
                       for f in sorted(d.iterdir()) if f.is_file()]
            props = {"@type": "CreateAction", "name": f"trial {d.name} of run {run}",
                     "instrument": [{"@id": engines[key].id}, {"@id": client.id}],
                     "object": [{"@id": spec_file.id}], "result": [{"@id": r.id} for r in results],
                     "description": f"model {(spec.get('model') or {}).get('id', '?')}, max concurrency "
                                    f"{(meta.get('trial') or {}).get('point', meta.get('max_concurrency', '?'))}"}
            if _iso(meta.get("t0_unix")):
                props["startTime"] = _iso(meta.get("t0_unix"))
            if _iso(meta.get("ended_unix")):
                props["endTime"] = _iso(meta.get("ended_unix"))
            crate.add(ContextEntity(crate, f"#{run}-{d.name}", properties=props))
    doc = crate.metadata.generate()
    return dumps(doc)


def write_crate(payload: Path, **kw) -> Path:
    p = payload / CRATE_NAME
    p.write_text(crate_json(payload, **kw), encoding="utf-8")
    return p
