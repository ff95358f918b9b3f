"""Regeneration checks: data/<role>/ regenerates byte for byte from data/raw."""

from __future__ import annotations

import io
import re
from pathlib import Path

from evidence.release.files import FileDigest, hash_files, inventory
from evidence.release.layout import (CRATE, NOTES, PAYLOAD_DIR, RELEASE_DIR, RELEASE_JSON, RELEASE_ROLES, Finding, dig, path_key,
                                     payload_path, role_of)
from evidence.release.regen import current_render_environment, run_release_regeneration
from evidence.release.regenerator import REGEN_DIR, UNVERIFIED_FLAG, RegenEnv
from evidence.release.verify.context import SKIP_NO_META, CheckFn, VerifyContext, check, result


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
        blocked = c.regen_blocked
        if blocked is not None:
            return "skip", blocked, []
        runs = c.run_ids()
        if not runs:
            return "fail", "no runs under data/raw", [Finding(f"{PAYLOAD_DIR}/raw/", "at least one run", "none")]
        f: list[Finding] = []
        env, regen = c.regen_result()
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
        return result(f, f"{role} of {len(runs)} run(s) regenerate byte for byte; regenerated with {_short(env)}",
                      "{n} " + role + " file(s) do not regenerate" + (_code_hint(c, env) if f else "")
                      + f"; regenerated with {_short(env)}")
    return fn


@check("regen.code", "the code that regenerates is exactly the code of a commit this repository's branches or tags reach")
def regen_code(c: VerifyContext):
    """Resolves the regenerating environment (nothing from the release runs here): pass when the code is bound,
    fail when the release's regenerator is refused, skip ("not checked") when it is not bound here."""
    blocked = c.regen_blocked
    if blocked is not None:
        if blocked.startswith("regeneration refused"):
            return "fail", blocked, [Finding(REGEN_DIR + "/", "the code of a commit this repository holds, and nothing "
                                             "else", c.regen_env().error or "")]
        return "skip", blocked, []
    env = c.regen_env()
    if env.unverified:
        return "skip", (f"NOT CHECKED: the release's own code is not bound to this repository and runs only because "
                        f"{UNVERIFIED_FLAG} was given; regenerating with: {env.describe}"), []
    return "pass", f"regenerating with: {env.describe}", []


_STEP_TAG = r"[A-Za-z0-9][A-Za-z0-9._-]*"


@check("metadata.steps", "release.json regenerate.steps are the known steps (git checkout, pip install -e ., evidence verify)")
def metadata_steps(c: VerifyContext):
    """A reader follows these steps by hand: anything but the three known commands (a shell pipe, another
    package, another path) is refused."""
    if not isinstance(c.meta, dict):
        return SKIP_NO_META
    steps = dig(c.meta, "regenerate", "steps")
    tag, repo_path = c.meta.get("tag"), c.meta.get("repo_path")
    ok_names = (isinstance(tag, str) and re.fullmatch(_STEP_TAG, tag) and isinstance(repo_path, str)
                and re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*", repo_path)
                and ".." not in repo_path.split("/") and repo_path.split("/")[-1] == tag)
    want = [f"git checkout {tag}", "python -m pip install -e .", f"evidence verify {repo_path}"]
    if ok_names and steps == want:
        return "pass", "the three known steps", []
    return "fail", "release.json regenerate.steps are not the known steps (they are shown to readers as commands to run)", [
        Finding(f"{RELEASE_JSON} regenerate.steps", want if ok_names else "git checkout <tag>; python -m pip install -e .; "
                "evidence verify releases/<tag>, with a plain tag and path", steps)]


def _code_hint(c: VerifyContext, env: RegenEnv) -> str:
    """Say whether the regenerating code is the code that froze the release.

    By default verify regenerates with the release's own code (its wheel, or the commit that froze
    it), so a difference is in the data or the render stack. With --regen-env current it uses this
    code: analysis code changed after the freeze changes the bytes by design."""
    if env.kind != "current":
        return "; the regenerating code is the code that froze the release, so the difference is in the data or the render stack"
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


@check("regen.release", "data/release/ and the RO-Crate regenerate byte for byte from data/analysis and data/raw")
def regen_release(c: VerifyContext):
    blocked = c.regen_blocked
    if blocked is not None:
        return "skip", blocked, []
    theirs = sorted((p for p in c.inv.files if (role_of(p) or ("", None))[0] in RELEASE_ROLES), key=path_key)
    if not theirs:
        return "skip", "the release has no release-level files (releases frozen before the index page carry none)", []
    env, _ = c.regen_result()
    import tempfile

    sde = ((c.meta or {}).get("freeze") or {}).get("source_date_epoch")
    with tempfile.TemporaryDirectory(prefix="evidence-regen-release-") as td:
        outs = run_release_regeneration(c.root / PAYLOAD_DIR, Path(td), sde=sde if isinstance(sde, int) else None,
                                        tag=str((c.meta or {}).get("tag") or ""), env=env)
        f: list[Finding] = []
        mine: dict[str, Path] = {}
        for role, out in outs.items():
            if isinstance(out, Exception):
                f.append(Finding(f"{PAYLOAD_DIR}/{RELEASE_DIR}/" if role == "release" else f"{PAYLOAD_DIR}/{CRATE}",
                                 f"regenerated {role} files", f"{type(out).__name__}: {out}", "regeneration failed"))
                continue
            for q in sorted(out.iterdir()):
                mine[f"{PAYLOAD_DIR}/{RELEASE_DIR}/{q.name}" if role == "release" else f"{PAYLOAD_DIR}/{q.name}"] = q
        notes = f"{PAYLOAD_DIR}/{RELEASE_DIR}/{NOTES}"  # the author's words: an input, not regenerated
        if not f:
            for rp in sorted((set(mine) | set(theirs)) - {notes}, key=path_key):
                if rp not in theirs:
                    f.append(Finding(rp, "present (regeneration produces it)", "absent from the release"))
                elif rp not in mine:
                    f.append(Finding(rp, "absent (regeneration does not produce it)", "present in the release"))
                elif (c.root / rp).read_bytes() != mine[rp].read_bytes():
                    f.append(Finding(rp, c.sha(rp), "other bytes", "bytes differ from the regenerated file"))
    return result(f, f"the index, compare and RO-Crate regenerate byte for byte; regenerated with {_short(env)}",
                  "{n} release-level file(s) do not regenerate" + f"; regenerated with {_short(env)}")


def _short(env: RegenEnv) -> str:
    what = {"wheel": "the release's own regenerator", "venv": "the release's own regenerator in an isolated environment",
            "commit": "the code of the commit that froze the release", "current": "this code (--regen-env current)"}
    return what.get(env.kind, env.kind) + (f" (NOT bound to this repository: {UNVERIFIED_FLAG})" if env.unverified else "") \
        + " (regen.code says which)"
