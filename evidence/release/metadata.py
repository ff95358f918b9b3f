"""release.json's derived files: bag-info.txt, the per-run provenance statements, and sealing (manifests)."""

from __future__ import annotations

import datetime as _dt
import shutil
from pathlib import Path

from evidence.canon import dumps, write_atomic
from evidence.release.files import FileDigest, HashProgress, hash_files, inventory
from evidence.release.layout import (BAG_INFO, BAGIT_DECLARATION, BAGIT_TXT, DERIVED_ROLES, MANIFEST, PAYLOAD_DIR,
                                     REGEN_FUNCTIONS, RELEASE_JSON, TAG_FILES, TAGMANIFEST, ReleaseError, path_key,
                                     payload_path, role_of, sha256_bytes)
from evidence.release.manifest import render_manifest
from evidence.release.regenerator import tag_area_files


def iso_utc(epoch: int) -> str:
    return _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_bag_info(meta: dict) -> bytes:
    """bag-info.txt as a function of release.json: verify rebuilds it and compares bytes."""
    files = meta.get("files") or []
    sde = int(meta["freeze"]["source_date_epoch"])
    fields_ = {
        "Bag-Software-Agent": f"evidence {meta['tool']['version']}",
        "Bagging-Date": iso_utc(sde)[:10],
        "External-Identifier": meta["tag"],
        "Payload-Oxum": f"{sum(int(f['bytes']) for f in files)}.{len(files)}",
    }
    # BagIt allows a label more than once: one "Supersedes" line per release this one supersedes (freeze --supersedes)
    sup = [f"Supersedes: {s['tag']}\n" for s in meta.get("supersedes") or []]
    return ("".join(f"{k}: {fields_[k]}\n" for k in sorted(fields_)) + "".join(sup)).encode("utf-8")


def build_provenance(meta: dict, run_id: str) -> dict:
    """data/provenance/<run-id>.json: an in-toto Statement with a SLSA provenance v1 predicate.
    A pure function of release.json (without the provenance files themselves)."""
    files = [f for f in meta.get("files", []) if f.get("run") == run_id]
    run = next((r for r in meta.get("runs", []) if r.get("id") == run_id), {})
    deps = [{"name": f["path"], "digest": {"sha256": f["sha256"]}} for f in files if f["role"] == "raw"]
    for c in (run.get("code") or {}).get("commits") or []:
        deps.append({"name": f"git commit the run ran at ({run_id})", "digest": {"gitCommit": c}})
    if meta["freeze"].get("code_commit"):
        deps.append({"name": "git commit of the code that regenerated the outputs", "digest": {"gitCommit": meta["freeze"]["code_commit"]}})
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": f["path"], "digest": {"sha256": f["sha256"]}} for f in files if f["role"] in DERIVED_ROLES],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {
                "buildType": "urn:evidence:regenerate:v1",
                "externalParameters": {"run": run_id, "raw": payload_path("raw", run_id), "functions": REGEN_FUNCTIONS},
                "internalParameters": {"render_environment": meta.get("render_environment"),
                                       "source_date_epoch": meta["freeze"]["source_date_epoch"]},
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": "urn:evidence:freeze", "version": {"evidence": meta["tool"]["version"]}},
                "metadata": {"invocationId": f"{meta['tag']}/{run_id}", "startedOn": iso_utc(meta["freeze"]["source_date_epoch"])},
            },
        },
    }


def _file_entries(digests: dict[str, FileDigest]) -> list[dict]:
    out = []
    for p, d in digests.items():
        r = role_of(p)
        out.append({"path": p, "role": r[0] if r else None, "run": r[1] if r else None, "bytes": d.size, "sha256": d.sha256})
    return sorted(out, key=lambda f: path_key(f["path"]))


def seal(release_dir: Path, meta: dict, *, workers: int | None = None, progress: HashProgress | None = None) -> dict:
    """Write the per-run provenance, release.json, bagit.txt, bag-info.txt and both manifests for the
    payload now under release_dir/data. `meta` is release.json without "files"; returns release.json."""
    release_dir = Path(release_dir)
    prov_dir = release_dir / PAYLOAD_DIR / "provenance"
    if prov_dir.exists():
        shutil.rmtree(prov_dir)
    inv = inventory(release_dir / PAYLOAD_DIR)
    digests = hash_files(release_dir / PAYLOAD_DIR, inv.files, workers=workers, progress=progress)
    errs = {p: d for p, d in digests.items() if isinstance(d, OSError)}
    if errs:
        raise ReleaseError(f"could not read payload files: {', '.join(f'{p} ({e})' for p, e in list(errs.items())[:5])}")
    digests = {f"{PAYLOAD_DIR}/{p}": d for p, d in digests.items()}
    meta = {k: v for k, v in meta.items() if k != "files"}
    meta["files"] = _file_entries(digests)
    for rid in sorted({r["id"] for r in meta.get("runs", [])}):
        body = dumps(build_provenance(meta, rid)).encode("utf-8")
        rel = payload_path("provenance", rid)
        write_atomic(release_dir / rel, body)
        digests[rel] = FileDigest(len(body), sha256_bytes(body))
    meta["files"] = _file_entries(digests)
    write_atomic(release_dir / RELEASE_JSON, dumps(meta))
    write_atomic(release_dir / BAGIT_TXT, BAGIT_DECLARATION)
    write_atomic(release_dir / BAG_INFO, render_bag_info(meta))
    write_atomic(release_dir / MANIFEST, render_manifest({p: d.sha256 for p, d in digests.items()}))
    tags = {n: sha256_bytes((release_dir / n).read_bytes()) for n in (*TAG_FILES, *tag_area_files(release_dir))}
    write_atomic(release_dir / TAGMANIFEST, render_manifest(tags))
    return meta
