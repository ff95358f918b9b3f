"""Regeneration checks: data/<role>/ regenerates byte for byte from data/raw."""

from __future__ import annotations

import io
from pathlib import Path

from evidence.release.files import FileDigest, hash_files, inventory
from evidence.release.layout import PAYLOAD_DIR, Finding, path_key, payload_path
from evidence.release.regen import current_render_environment
from evidence.release.verify.context import CheckFn, VerifyContext, check, result


def _pixels_equal(a: bytes, b: bytes) -> bool | None:
    try:
        from PIL import Image

        ia, ib = Image.open(io.BytesIO(a)), Image.open(io.BytesIO(b))
        return ia.size == ib.size and ia.convert("RGBA").tobytes() == ib.convert("RGBA").tobytes()
    except Exception:
        pass
    try:
        import matplotlib.image as mpimg
        import numpy as np

        return bool(np.array_equal(mpimg.imread(io.BytesIO(a), format="png"), mpimg.imread(io.BytesIO(b), format="png")))
    except Exception:
        return None


def _env_diff(c: VerifyContext) -> dict[str, dict]:
    try:
        now = current_render_environment()
    except Exception as e:
        return {"render_environment": {"release": "?", "here": f"unavailable ({e})"}}
    then = (c.meta or {}).get("render_environment") or {}
    return {k: {"release": then.get(k), "here": now.get(k)} for k in sorted(set(now) | set(then), key=str) if then.get(k) != now.get(k)}


def _regen_check(role: str) -> CheckFn:
    def fn(c: VerifyContext):
        if not c.regen_enabled:
            return "skip", "regeneration not asked for (--no-regen)", []
        if c.root is None:
            return "skip", "no release folder", []
        runs = c.run_ids()
        if not runs:
            return "fail", "no runs under data/raw", [Finding(f"{PAYLOAD_DIR}/raw/", "at least one run", "none")]
        f: list[Finding] = []
        regen = c.regen()
        env_diff: dict | None = None
        for rid in runs:
            if rid not in regen:
                f.append(Finding(payload_path("raw", rid), "the raw files of the run", "missing"))
                continue
            out = regen[rid][role]
            if isinstance(out, Exception):
                f.append(Finding(payload_path(role, rid), f"regenerated {role}", f"{type(out).__name__}: {out}", "regeneration failed"))
                continue
            mine = hash_files(out, inventory(out).files, workers=c.workers)
            prefix = payload_path(role, rid)
            theirs = {p[len(prefix):]: p for p in c.inv.files if p.startswith(prefix)}
            for rel in sorted(set(mine) | set(theirs), key=path_key):
                rp = prefix + rel
                if rel not in theirs:
                    f.append(Finding(rp, "present (regeneration produces it)", "absent from the release"))
                elif rel not in mine:
                    f.append(Finding(rp, "absent (regeneration does not produce it)", "present in the release"))
                else:
                    d = mine[rel]
                    if isinstance(d, OSError) or d.sha256 != c.sha(rp):
                        found = d.sha256 if isinstance(d, FileDigest) else str(d)
                        msg = "bytes differ from the regenerated file"
                        if rp.lower().endswith(".png"):
                            eq = _pixels_equal((out / rel).read_bytes(), (c.root / rp).read_bytes())
                            if env_diff is None:
                                env_diff = _env_diff(c)
                            envs = ", ".join(f"{k} {v['release']} (release) vs {v['here']} (here)" for k, v in env_diff.items()) or "none"
                            msg += ("; pixels are identical" if eq else "; pixels differ" if eq is False else "; could not decode to compare pixels")
                            msg += f"; render environment differences: {envs}"
                        f.append(Finding(rp, c.sha(rp), found, msg))
        return result(f, f"{role} of {len(runs)} run(s) regenerate byte for byte",
                      "{n} " + role + " file(s) do not regenerate" + (_code_hint(c) if f else ""))
    return fn


def _code_hint(c: VerifyContext) -> str:
    """Say whether the regenerating code is the code that froze the release.

    Verify regenerates with the code it runs from; analysis code that changed after the freeze
    changes the bytes by design. The auditor then regenerates at the release's tag to tell a
    tampered file from a tool change."""
    frozen_at = ((c.meta or {}).get("freeze") or {}).get("code_commit")
    if not frozen_at:
        return "; the release does not record the code commit it was frozen at"
    try:
        import git

        repo = git.Repo(Path(__file__).resolve().parent, search_parent_directories=True)
        repo.git.diff("--quiet", frozen_at, "--", "evidence", "templates")
    except ImportError:
        return f"; cannot tell whether this code is the code that froze the release ({frozen_at[:12]}): no GitPython"
    except Exception as e:  # GitCommandError: exit 1 = differs; anything else = cannot tell
        if getattr(e, "status", None) == 1:
            tag = c.meta.get("tag") if c.meta else None
            return (f"; the code regenerating here differs from the code that froze the release (commit "
                    f"{frozen_at[:12]}) in evidence/ or templates/: regenerate at the release's tag"
                    f"{f' (git checkout {tag})' if tag else ''} to tell a tampered file from a tool change")
        return f"; cannot tell whether this code is the code that froze the release ({frozen_at[:12]})"
    return f"; this is the code that froze the release (commit {frozen_at[:12]}), so the difference is in the data"


regen_analysis = check("regen.analysis", "data/analysis/ regenerates byte for byte from data/raw")(_regen_check("analysis"))
regen_figures = check("regen.figures", "data/figures/ regenerates byte for byte from data/raw")(_regen_check("figures"))
regen_report = check("regen.report", "data/report/ regenerates byte for byte from data/raw")(_regen_check("report"))
