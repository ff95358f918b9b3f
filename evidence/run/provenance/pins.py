"""The pins: requested vs effective for everything the spec pins, and why a run was refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from evidence.spec.model import Spec


# -------------------------------------------------------------------- pins --


def _public(v: str | None) -> str | None:
    return v.split("+", 1)[0] if isinstance(v, str) else v


def check_pins(spec: Spec, prov: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Requested vs effective for every pin: [{"pin", "requested", "effective", "ok", "note"?}]."""
    pins: list[dict[str, Any]] = []
    acc = prov.get("accelerator") or {}
    devs = [d for d in acc.get("devices") or [] if d.get("visible", True)]
    names = sorted({d.get("name") or "?" for d in devs})
    want = spec.hardware.accelerator
    if want:
        ok = bool(devs) and all((d.get("name") or "").strip().lower() == want.strip().lower() for d in devs)
        pins.append({"pin": "accelerator model", "requested": want, "effective": ", ".join(names) if names else "none",
                     "ok": ok, **({} if devs else {"note": acc.get("how")})})
    else:
        pins.append({"pin": "accelerator model", "requested": None, "effective": ", ".join(names) if names else "none",
                     "ok": True, "note": "not pinned (the spec expects no accelerator)"})
    count = acc.get("visible_count", len(devs))
    pins.append({"pin": "accelerator count", "requested": spec.hardware.count, "effective": count,
                 "ok": count == spec.hardware.count})

    eng = prov.get("engine") or {}
    eff_v = eng.get("version")
    if spec.engine.version:
        ok = eff_v is not None and (eff_v == spec.engine.version or _public(eff_v) == _public(spec.engine.version))
        build = eng.get("build") or {}
        pins.append({"pin": "engine version", "requested": spec.engine.version,
                     "effective": (f"{eff_v} ({build.get('distribution')})" if build.get("distribution") and eff_v else eff_v),
                     "ok": ok, **({"note": f"read from {eng.get('version_source')}"} if eng.get("version_source") else
                                  {"note": "the engine version could not be read"})})
    else:
        pins.append({"pin": "engine version", "requested": None, "effective": eff_v, "ok": True, "note": "not pinned"})

    model = prov.get("model") or {}
    if spec.model.revision:
        eff = model.get("revision_reported") or model.get("revision_from_path")
        if spec.model.path and not eff:
            pins.append({"pin": "model revision", "requested": spec.model.revision, "effective": None, "ok": False,
                         "note": "served from a local folder that does not show its revision (not a hub snapshot path); "
                                 "the file hashes are recorded instead"})
        else:
            eff = eff or (spec.model.revision if not spec.model.path else None)
            pins.append({"pin": "model revision", "requested": spec.model.revision, "effective": eff,
                         "ok": eff == spec.model.revision,
                         **({"note": "passed to the engine as --revision; confirmed by the engine's log"}
                            if model.get("revision_reported") else
                            {"note": "passed to the engine as --revision (not confirmed yet)"} if not spec.model.path else {})})
    else:
        pins.append({"pin": "model revision", "requested": None, "effective": model.get("revision_reported"),
                     "ok": True, "note": "not pinned"})

    git = prov.get("git") or {}
    commit = git.get("commit")
    if spec.code.commit:
        pins.append({"pin": "code commit", "requested": spec.code.commit, "effective": commit,
                     "ok": commit == spec.code.commit,
                     **({"note": f"from {git.get('commit_source')}"} if git.get("commit_source") else
                        {"note": "no commit could be read or was passed in"})})
    else:
        pins.append({"pin": "code commit", "requested": None, "effective": commit, "ok": True, "note": "not pinned"})

    dirty = git.get("dirty")
    eff_tree = "unknown" if dirty is None else ("dirty" if dirty else "clean")
    if dirty and git.get("present"):
        eff_tree += f" ({git.get('modified_count', 0)} modified, {git.get('untracked_count', 0)} untracked)"
    if spec.code.allow_dirty:
        pins.append({"pin": "clean tree", "requested": "dirty allowed", "effective": eff_tree, "ok": True})
    else:
        pins.append({"pin": "clean tree", "requested": "clean", "effective": eff_tree, "ok": dirty is False,
                     **({"note": "no .git and no dirty flag passed in: cleanliness cannot be confirmed"}
                        if dirty is None else {})})
    return pins


def failed_pins(pins: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in pins if not p.get("ok")]


# --------------------------------------------------------------- refusal --


def _engine(spec: Spec, prov: Mapping[str, Any], pin: Mapping[str, Any]) -> tuple[str, str]:
    from evidence.engines import adapter_class  # how a version is probed is the adapter's to say

    return adapter_class(spec.engine.kind).version_pin_hint(spec, prov, pin)


def _accelerator(spec: Spec, prov: Mapping[str, Any], pin: Mapping[str, Any]) -> tuple[str, str]:
    acc = prov.get("accelerator") or {}
    how = acc.get("how") or ("NVML" if acc.get("found") != "none" else "NVML, then nvidia-smi")
    vis = acc.get("cuda_visible_devices")
    probed = f"probed {how}" + (f" with CUDA_VISIBLE_DEVICES={vis}" if vis else "")
    want = f"{spec.hardware.count} x {spec.hardware.accelerator or 'no accelerator'}"
    return probed, (f"run on a machine with {want} (CUDA_VISIBLE_DEVICES in engine.env selects devices), "
                    "or change hardware: in the spec")


def _code(spec: Spec, prov: Mapping[str, Any], pin: Mapping[str, Any]) -> tuple[str, str]:
    git = prov.get("git") or {}
    src = git.get("commit_source") or "git HEAD, --code-commit and EVIDENCE_CODE_COMMIT (none gave a commit)"
    where = git.get("root") or "this checkout"
    return (f"probed {src} in {where}",
            f"check out {str(pin.get('requested'))[:12]} in this repository, or drop code.commit "
            "(a commit of another repository, such as the article's, belongs in code.article_commit)")


def _tree(spec: Spec, prov: Mapping[str, Any], pin: Mapping[str, Any]) -> tuple[str, str]:
    git = prov.get("git") or {}
    shown = (git.get("modified") or [])[:3] + (git.get("untracked") or [])[:3]
    return (f"probed `git status` in {git.get('root') or 'this checkout'}" + (f" ({', '.join(shown)} ...)" if shown else ""),
            "commit or remove the changes, or set code.allow_dirty: true")


def _model(spec: Spec, prov: Mapping[str, Any], pin: Mapping[str, Any]) -> tuple[str, str]:
    if spec.model.path:
        return (f"probed the local folder {spec.model.path}",
                "serve a hub snapshot folder (…/snapshots/<revision>/) or drop model.revision")
    return "probed the engine's log for the revision it loaded", "check the model id and revision"


_EXPLAIN = {"engine version": _engine, "accelerator model": _accelerator, "accelerator count": _accelerator,
            "code commit": _code, "clean tree": _tree, "model revision": _model}


def refusal_message(spec: Spec, prov: Mapping[str, Any], bad: Sequence[Mapping[str, Any]], prov_path: Path) -> str:
    """One paragraph: each mismatch with what was probed and what to do, then --allow-drift."""
    parts = []
    last = None
    for p in bad:
        explain = _EXPLAIN.get(str(p.get("pin")))
        found = "nothing" if p.get("effective") is None else repr(p["effective"])
        line = f"{p['pin']}: requested {p['requested']!r}, found {found}"
        if explain is not None:
            said = explain(spec, prov, p)
            line += " (the same probe and next step)" if said == last else f" ({said[0]}; next: {said[1]})"
            last = said
        parts.append(line)
    return (f"the environment does not match the spec's pins: {'; '.join(parts)}. Nothing was run; provenance is in "
            f"{prov_path}. Fix the environment, or pass --allow-drift to run anyway and record the drift.")
