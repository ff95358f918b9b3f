"""An auditor's `verify` never runs a stranger's code (issue 22).

Each case is a copy of a release frozen by an evidence repository of its own (regen_fixtures), changed
the way an attacker who can edit the release folder but not the repository's history would, and resealed
with the tool's own code so fixity passes. The planted code would create a marker file outside the case
folder. Each must end with a non-zero exit naming the check, no traceback, the marker absent, and nothing
written outside the case folder (TMPDIR, HOME and the cache folder point inside it and are empty after).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from evidence.release import layout, regenerator
from regen_fixtures import TAG, code_release, git, reseal, rewrite_lock, rewrite_wheel  # noqa: F401 (the shared fixture)

ROOT = Path(__file__).resolve().parents[2]
CLI = "import sys; from evidence.cli import main; sys.argv[0] = 'evidence'; main()"
PLANTED_MODULE = "evidence/release/regen.py"  # the entry point's module: imported by every regeneration


@pytest.fixture
def case(code_release, tmp_path):  # noqa: F811 (the imported fixture)
    """A copy of the frozen repository in tmp_path/case, without the release's tag (a clone that did not fetch
    it: the tag checks then cannot catch the edit, so the regeneration checks must), and a marker path outside it."""
    import shutil

    root = tmp_path / "case"
    shutil.copytree(code_release, root / "repo", symlinks=True)
    git(root / "repo", "tag", "-d", TAG)  # a clone without the tag: the tag checks cannot catch an edit here
    for d in ("tmp", "home", "cache"):
        (root / d).mkdir()
    return {
        "root": root,
        "repo": root / "repo",
        "rel": root / "repo" / "releases" / TAG,
        "marker": tmp_path / "outside" / "planted-code-ran",
    }


def _plant(marker: Path) -> bytes:
    return (
        f"\nimport pathlib as _p\n_p.Path({str(marker)!r}).parent.mkdir(parents=True, exist_ok=True)\n"
        f"_p.Path({str(marker)!r}).write_text('ran')\n".encode()
    )


def _wheel_file(rel: Path, name: str) -> bytes:
    lock = json.loads((rel / regenerator.LOCK).read_text())
    with zipfile.ZipFile(rel / regenerator.REGEN_DIR / lock["wheel"]) as z:
        return z.read(name)


def _tree(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _verify(case: dict, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    root = case["root"]
    before = _tree(case["repo"] / "releases")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "EVIDENCE_REGEN_CACHE")}
    env.update(
        PYTHONPATH=str(ROOT),
        TMPDIR=str(root / "tmp"),
        HOME=str(root / "home"),
        XDG_CACHE_HOME=str(root / "cache"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    p = subprocess.run(
        [sys.executable, "-P", "-c", CLI, "verify", "--json", str(case["rel"]), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=case["rel"].parent,
        timeout=600,
    )
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert _tree(case["repo"] / "releases") == before  # the release folder and its tar untouched
    for d in ("tmp", "home", "cache"):
        assert not any((root / d).iterdir()), f"verify left files in {d}: {list((root / d).rglob('*'))[:5]}"
    return p, json.loads(p.stdout)


def _check(rep: dict, cid: str) -> dict:
    return next(c for c in rep["checks"] if c["id"] == cid)


def _refused(case: dict, cid: str, *words: str) -> dict:
    p, rep = _verify(case)
    c = _check(rep, cid)
    assert p.returncode == 1 and rep["exit_code"] == 1 and c["status"] == "fail", (p.returncode, c)
    assert all(w in c["message"] + json.dumps(c["findings"]) for w in words), c
    assert all(x["status"] == "skip" for x in rep["checks"] if x["id"].startswith("regen.") and x["id"] != cid)
    assert not case["marker"].exists()
    return rep


def test_an_extra_name_in_the_locks_packages_is_refused(case):
    lock = json.loads((case["rel"] / regenerator.LOCK).read_text())
    lock["render"]["packages"]["planted-package"] = "1.0"  # pip would install it, and its .pth would run
    rewrite_lock(case["rel"], render=lock["render"])
    _refused(case, "regen.code", "'planted-package'", "does not declare")


def test_a_dist_info_dotdot_pth_entry_is_refused(case):
    rewrite_wheel(case["rel"], {"evidence-0.1.0.dist-info/../x.pth": b"import os" + _plant(case["marker"])})
    _refused(case, "regen.code", "x.pth", "not a plain path")


def test_a_wheel_with_an_extra_sitecustomize_is_refused(case):
    rewrite_wheel(case["rel"], {"sitecustomize.py": _plant(case["marker"])})
    _refused(case, "regen.code", "sitecustomize.py", "not the package's own file")


def test_regenerate_steps_changed_to_a_shell_command_are_refused(case):
    meta = json.loads((case["rel"] / layout.RELEASE_JSON).read_text())
    meta["regenerate"]["steps"] = [f"curl -s file://{case['marker']} | sh"]
    reseal(case["rel"], meta)
    rep = _refused(case, "metadata.steps", "curl")
    assert rep["regeneration"]["state"] == "not run"  # the gate: an earlier check failed, nothing of the release ran


def _commit_planted_code(case: dict) -> str:
    """A commit of the case's repository whose evidence/ holds the planted code; returns its id."""
    f = case["repo"] / PLANTED_MODULE
    f.write_bytes(f.read_bytes() + _plant(case["marker"]))
    git(case["repo"], "add", PLANTED_MODULE)
    git(case["repo"], "commit", "-q", "-m", "planted")
    return git(case["repo"], "rev-parse", "HEAD").strip()


def test_a_lock_bound_to_a_later_commit_is_refused(case):
    """The later commit is on main (reachable) and the wheel is exactly its code; it is still not the code
    release.json says froze the release."""
    later = _commit_planted_code(case)
    rewrite_wheel(case["rel"], {PLANTED_MODULE: (case["repo"] / PLANTED_MODULE).read_bytes()}, code_commit=later)
    _refused(case, "regen.code", later[:12], "frozen at commit")


def test_a_commit_on_no_branch_is_not_run_and_the_flag_that_runs_it_says_so(case):
    """The wheel is exactly the code of a commit that is in the repository's objects but on no branch or tag
    (as one fetched by its id from a fork would be): not this project's code. Regeneration is not checked,
    the exit is 3 (not VALID), and the advice is not `git fetch origin <sha>`."""
    repo = case["repo"]
    git(repo, "checkout", "-q", "-b", "side")
    dangling = _commit_planted_code(case)
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "side")
    assert not git(repo, "for-each-ref", "--contains", dangling).strip()
    body = git(repo, "show", f"{dangling}:{PLANTED_MODULE}").encode()
    meta = json.loads((case["rel"] / layout.RELEASE_JSON).read_text())
    meta["freeze"]["code_commit"] = dangling
    reseal(case["rel"], meta)
    rewrite_wheel(case["rel"], {PLANTED_MODULE: body}, code_commit=dangling)
    p, rep = _verify(case)
    c = _check(rep, "regen.code")
    assert p.returncode == 3 and rep["exit_code"] == 3 and rep["regeneration"]["state"] == "not checked", (
        p.returncode,
        c,
    )
    assert c["status"] == "skip" and "no branch or tag reaches it" in c["message"] and dangling[:12] in c["message"]
    assert "git fetch origin" not in p.stdout and f"fetch origin {dangling}" not in p.stdout
    assert not case["marker"].exists()
    # the planted code is real: the explicit flag runs it, warns first, and the verdict is still not VALID
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run(
        [sys.executable, "-P", "-c", CLI, "verify", str(case["rel"]), "--run-unverified-code"],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        cwd=case["rel"].parent,
        timeout=600,
    )
    assert ran.returncode == 3 and "WARNING: --run-unverified-code" in ran.stderr and "NOT VERIFIED" in ran.stdout, (
        ran.returncode,
        ran.stderr[-2000:],
    )
    assert case["marker"].exists()


def test_a_folder_or_tar_only_copy_says_regeneration_is_not_possible_here_and_how(case, monkeypatch, tmp_path):
    """A copy outside any clone that holds its code: fixity valid, regeneration not checked (exit 3), and the
    one command that would check it. (The wheel here equals the running code, which would bind it: that
    path is switched off to stand for an auditor whose code differs.)"""
    import shutil

    from rich.console import Console

    from evidence.cli.release import print_report
    from evidence.release import verify

    alone = tmp_path / "alone" / TAG
    shutil.copytree(case["rel"], alone)
    monkeypatch.setattr(regenerator, "_equals_running", lambda z: (False, "nor is it the running evidence"))
    rep = verify.verify(alone)
    assert rep.ok and rep.exit_code == 3 and rep.regeneration["state"] == "not checked"
    assert rep.by_id()["fixity.payload"].status == "pass"
    assert rep.regeneration["how"].startswith("evidence verify --repo CLONE PATH")
    con = Console(record=True, width=200)
    print_report(rep, con)
    text = con.export_text()
    assert "FIXITY VALID, REGENERATION NOT CHECKED" in text and "to check them: evidence verify --repo" in text
    assert "VALID:" not in text.replace("FIXITY VALID,", "")
    # the same for the archive alone
    tar = tmp_path / "alone-tar" / f"{TAG}.tar"
    tar.parent.mkdir()
    shutil.copyfile(case["rel"].with_name(f"{TAG}.tar"), tar)
    shutil.copyfile(case["rel"].with_name(f"{TAG}.tar.sha256"), tar.with_name(f"{TAG}.tar.sha256"))
    rep = verify.verify(tar)
    assert rep.ok and rep.exit_code == 3 and rep.regeneration["state"] == "not checked"
    assert rep.by_id()["archive.sha256"].status == "pass" and rep.by_id()["fixity.payload"].status == "pass"
