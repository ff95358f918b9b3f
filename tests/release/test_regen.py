"""Regeneration: one derive pass; a release regenerates with its own code, so the tool can change.

A release frozen here carries regenerator/<wheel> and regenerator/lock.json. The analysis code is
then changed (a modified copy of the package, run in a subprocess): regenerating with the changed
code (--regen-env current) fails, and the release stays VALID through its own regenerator. Releases
frozen before (the committed article1-h200-v1.0) regenerate through the commit that froze them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import evidence
from evidence.release import layout, regenerator, verify
from rundir_fixtures import build_run
from conftest import skip_unless_ci
from regen_fixtures import SDE, RUN_ID, TAG, code_release, git, reseal, rewrite_lock, rewrite_wheel  # noqa: F401 (the shared fixture)

ROOT = Path(__file__).resolve().parents[2]
CLI = "import sys; from evidence.cli import main; sys.argv[0] = 'evidence'; main()"


_git = git


@pytest.fixture(scope="module")
def frozen(code_release):  # noqa: F811 (the imported fixture)
    """An evidence repository freezing its own run, as the real one does (regen_fixtures.code_release)."""
    return code_release


def _copy(frozen: Path, tmp_path: Path) -> Path:
    """A copy of the repository without the release's tag (as a clone that did not fetch it): an edited
    release then passes every check before regeneration, which is what these tests are about."""
    repo = tmp_path / "repo"
    shutil.copytree(frozen, repo, symlinks=True)
    git(repo, "tag", "-d", TAG)
    return repo / "releases" / TAG


def _changed_code(tmp_path: Path) -> Path:
    """A copy of this package whose analysis writes other bytes (as an improved analysis would)."""
    code = tmp_path / "code"
    shutil.copytree(Path(evidence.__file__).parent, code / "evidence", ignore=shutil.ignore_patterns("__pycache__"))
    with open(code / "evidence" / "analysis" / "analyze.py", "a", encoding="utf-8") as f:
        f.write("\n\n_original = compute_analysis\n\n\ndef compute_analysis(data):\n"
                "    res = _original(data)\n    res['changed_by_a_later_version'] = True\n    return res\n")
    return code


def _verify_cli(code: Path | None, rel: Path, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    r = subprocess.run([sys.executable, "-P", "-c", CLI, "verify", "--json", str(rel), *args], capture_output=True,
                       text=True, env=env, cwd=rel.parent)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def _status(rep: dict) -> dict[str, str]:
    return {c["id"]: c["status"] for c in rep["checks"]}


def test_freeze_puts_the_regenerator_in_the_tag_area(frozen):
    rel = frozen / "releases" / TAG
    lock = json.loads((rel / regenerator.LOCK).read_text())
    assert lock["code_commit"] == _git(frozen, "rev-parse", "HEAD^").strip()  # the commit the release was made on
    wheel = rel / regenerator.REGEN_DIR / lock["wheel"]
    assert lock["entry"] == "evidence.release.regen:regenerate"
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == lock["wheel_sha256"]
    assert {"numpy", "matplotlib", "pillow", "jinja2", "pydantic"} <= set(lock["render"]["packages"])
    assert lock["render"]["freetype"] and lock["render"]["python"]
    tagged = (rel / layout.TAGMANIFEST).read_text()
    assert f"  {regenerator.LOCK}\n" in tagged and f"  regenerator/{lock['wheel']}\n" in tagged
    assert regenerator.lock_differences(lock["render"]) == []


def test_old_release_stays_valid_through_its_own_regenerator_after_the_analysis_changed(frozen, tmp_path):
    rel = _copy(frozen, tmp_path)
    code = _changed_code(tmp_path)
    # the change bites: regenerating with the changed code does not give the published bytes
    cur = _verify_cli(code, rel, "--regen-env", "current")
    assert _status(cur)["regen.analysis"] == "fail" and cur["regen_env"]["kind"] == "current"
    assert str(code) in cur["regen_env"]["describe"]
    # the release's own regenerator (its wheel) reproduces every derived byte
    own = _verify_cli(code, rel)
    assert own["ok"], [c for c in own["checks"] if c["status"] == "fail"]
    assert own["regen_env"]["kind"] == "wheel" and "its files equal evidence/ at commit" in own["regen_env"]["describe"]
    assert all(_status(own)[f"regen.{r}"] == "pass" for r in ("analysis", "figures", "report"))
    assert "the release's own regenerator" in next(c for c in own["checks"] if c["id"] == "regen.report")["message"]
    assert own["exit_code"] == 0 and own["regeneration"]["state"] == "checked"


_rewrite_lock = rewrite_lock


def _edit_wheel(rel, name: str, extra: bytes) -> None:
    """Append bytes to one file of the release's wheel (RECORD agreeing) and reseal the lock's digest."""
    import zipfile

    lock = json.loads((rel / regenerator.LOCK).read_text())
    with zipfile.ZipFile(rel / regenerator.REGEN_DIR / lock["wheel"]) as z:
        body = z.read(name)
    rewrite_wheel(rel, {name: body + extra})


def test_a_wheel_equal_to_the_running_code_is_bound_without_a_commit(frozen, tmp_path):
    """A user who pip-installed evidence freezes in their own repository: no commit of evidence is there,
    but an auditor running the same evidence runs nothing new by running the release's wheel."""
    rel = _copy(frozen, tmp_path)
    _rewrite_lock(rel, code_commit=None)
    rep = verify.verify(rel)
    assert rep.regen_env["kind"] == "wheel" and "equal the running evidence" in rep.regen_env["describe"]
    assert all(x.status == "pass" for x in rep.checks if x.id.startswith("regen."))


def test_an_unbound_wheel_is_not_run_unless_asked(frozen, tmp_path):
    rel = _copy(frozen, tmp_path)
    _rewrite_lock(rel, code_commit=None)
    _edit_wheel(rel, "evidence/derive.py", b"\n# not the running code, not a commit's\n")
    rep = verify.verify(rel)
    c = rep.by_id()["regen.code"]
    assert c.status == "skip" and "not checked" in c.message and "not bound to this repository" in c.message
    assert rep.exit_code == 3 and rep.regeneration["state"] == "not checked"
    assert all(x.status == "skip" for x in rep.checks if x.id.startswith("regen."))
    asked = verify.verify(rel, regen_env="unverified")  # --run-unverified-code
    assert asked.regen_env["kind"] == "wheel" and asked.regen_env["unverified"]
    assert "run by request (--run-unverified-code)" in asked.regen_env["describe"]
    assert all(x.status == "pass" for x in asked.checks if x.id.startswith("regen.") and x.id != "regen.code")
    assert asked.exit_code == 3 and asked.regeneration["state"] == "unverified"  # never VALID


def test_a_forged_wheel_is_refused(frozen, tmp_path):
    """A forger ships a regenerator that reproduces forged derived files: its bytes are not the code of
    the commit it names, so verify does not run it."""
    rel = _copy(frozen, tmp_path)
    _edit_wheel(rel, "evidence/derive.py", b"\n# reproduces whatever the release holds\n")
    rep = verify.verify(rel)
    c = rep.by_id()["regen.code"]
    assert c.status == "fail" and "evidence/derive.py is not the file of commit" in c.message
    assert rep.by_id()["regen.report"].status == "skip" and rep.exit_code == 1


def test_tampered_derived_file_fails_through_the_own_regenerator(frozen, tmp_path):
    rel = _copy(frozen, tmp_path)
    f = rel / f"data/analysis/{RUN_ID}/points.csv"
    f.write_text(f.read_text().replace("1", "2", 1))
    reseal(rel)
    rep = verify.verify(rel, repo=None)
    by = rep.by_id()
    assert by["regen.analysis"].status == "fail" and by["regen.analysis"].path == f"data/analysis/{RUN_ID}/points.csv"
    assert "the difference is in the data" in by["regen.analysis"].message
    assert rep.regen_env["kind"] == "wheel"


def _drop_regenerator(rel: Path, commit: str | None) -> None:
    shutil.rmtree(rel / regenerator.REGEN_DIR)
    meta = json.loads((rel / layout.RELEASE_JSON).read_text())
    meta["freeze"]["code_commit"] = commit
    reseal(rel, meta)


def test_no_regenerator_and_the_commit_not_here_says_what_could_not_be_done(frozen, tmp_path):
    rel = _copy(frozen, tmp_path)
    _drop_regenerator(rel, "0" * 40)
    rep = verify.verify(rel, repo=None)
    for r in ("code", "analysis", "figures", "report"):
        c = rep.by_id()[f"regen.{r}"]
        assert c.status == "skip" and "0000000000" in c.message and "not in this repository" in c.message
        assert "not checked" in c.message and "git fetch" not in c.message  # a fetch by id may bring a fork's commit
    assert rep.regen_env["kind"] == "unavailable" and rep.exit_code == 3
    assert rep.regeneration["how"].startswith("evidence verify --repo ")
    # skipping is explicit only
    assert all(rep2.status == "skip" for rep2 in verify.verify(rel, regen=False).checks if rep2.id.startswith("regen."))


def test_no_regenerator_regenerates_from_the_commit_that_froze_it_or_says_why_not(frozen, tmp_path):
    rel = _copy(frozen, tmp_path)
    repo = rel.parents[1]
    code_commit = _git(repo, "rev-parse", "HEAD^").strip()
    _drop_regenerator(rel, code_commit)
    rep = verify.verify(rel, regen_env="auto")
    assert rep.regen_env["kind"] == "commit" and code_commit[:12] in rep.regen_env["describe"]
    assert all(c.status == "pass" for c in rep.checks if c.id.startswith("regen.")), \
        [(c.id, c.message) for c in rep.checks if c.id.startswith("regen.")]
    # a commit whose tree holds no evidence package
    _git(repo, "rm", "-rq", "evidence")
    _git(repo, "commit", "-q", "-m", "no code")
    _drop_regenerator_meta(rel, _git(repo, "rev-parse", "HEAD").strip())
    c = verify.verify(rel).by_id()["regen.figures"]
    assert c.status == "skip" and "holds no evidence package" in c.message


def _drop_regenerator_meta(rel: Path, commit: str) -> None:
    meta = json.loads((rel / layout.RELEASE_JSON).read_text())
    meta["freeze"]["code_commit"] = commit
    reseal(rel, meta)


def test_a_lock_for_another_python_is_refused_with_the_reason(frozen, tmp_path):
    rel = _copy(frozen, tmp_path)
    lock = json.loads((rel / regenerator.LOCK).read_text())
    lock["render"]["python"] = "3.9.0"
    (rel / regenerator.LOCK).write_text(json.dumps(lock))
    reseal(rel)
    rep = verify.verify(rel)
    c = rep.by_id()["regen.analysis"]
    assert c.status == "skip" and "needs Python 3.9.0" in c.message and rep.exit_code == 3


@pytest.mark.parametrize("name, kind", [("article1-h200-v1.0", "commit"), ("article1-h200-v1.1", "wheel")])
def test_committed_release_regenerates_through_its_own_code(name, kind):
    """v1.0 (no regenerator) through the commit that froze it, v1.1 through its wheel, bound to a commit a
    branch of this clone reaches: VALID with regeneration, tags or not (issue 22)."""
    rel = ROOT / "releases" / name
    if not rel.is_dir():
        skip_unless_ci("the committed release is not in this checkout")
    rep = verify.verify(rel)
    by = rep.by_id()
    assert rep.regen_env["kind"] == kind, rep.regen_env
    assert by["regen.code"].status == "pass" and "a branch or tag of this repository reaches" in by["regen.code"].message
    assert all(by[f"regen.{r}"].status == "pass" for r in ("analysis", "figures", "report")), \
        [(c.id, c.message) for c in rep.checks if c.id.startswith("regen.")]
    # v1.0 was frozen before releases carried an index page: nothing release-level to regenerate
    assert by["regen.release"].status == ("skip" if name.endswith("v1.0") else "pass"), by["regen.release"].message
    assert rep.exit_code == 0 and rep.regeneration["state"] == "checked", [(c.id, c.message) for c in rep.failed]


def test_derive_is_the_three_functions_in_one_pass(tmp_path, monkeypatch):
    from evidence.analysis import analyze_run
    from evidence.derive import derive
    from evidence.figures import render_figures
    from evidence.report import render_report

    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(SDE))
    a = build_run(tmp_path / "a")
    b = build_run(tmp_path / "b")
    analyze_run(a)
    render_figures(a)
    render_report(a)
    files = derive(b, tmp_path / "out")

    def tree(folder: Path) -> dict[str, str]:
        return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(folder.rglob("*")) if p.is_file() and p.relative_to(folder).parts[0] in files}

    assert tree(a) == tree(tmp_path / "out") and set(files) == {"analysis", "figures", "report"}


def test_report_never_writes_into_a_release(frozen, tmp_path):
    rel = frozen / "releases" / TAG
    raw = rel / "data" / "raw" / RUN_ID
    for args in ([str(raw)], [str(frozen / "runs" / RUN_ID), "--out", str(rel / "data")]):
        r = subprocess.run([sys.executable, "-c", CLI, "report", *args], capture_output=True, text=True)
        assert r.returncode == 2 and "never writes into a release" in r.stderr and "--out" in r.stderr
    ok = subprocess.run([sys.executable, "-c", CLI, "report", str(raw), "--out", str(tmp_path / "out")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "out" / "report" / "report.html").is_file()


def test_a_lock_without_hashes_is_never_installed(frozen, tmp_path):
    """The lock pins another cycler and records no hashes: pip would install whatever an index serves under
    that name, so nothing is installed; the bound code runs on this interpreter and says how it differs."""
    rel = _copy(frozen, tmp_path)
    lock = json.loads((rel / regenerator.LOCK).read_text())
    here = lock["render"]["packages"]["cycler"]
    lock["render"]["packages"]["cycler"] = "0.12.0" if here != "0.12.0" else "0.12.1"
    (rel / regenerator.LOCK).write_text(json.dumps(lock))
    reseal(rel)
    rep = verify.verify(rel, repo=None)
    assert rep.regen_env["kind"] == "wheel" and "cycler" in rep.regen_env["describe"]
    assert "records no hashes" in rep.regen_env["describe"]
    assert all(c.status == "pass" for c in rep.checks if c.id.startswith("regen.")), \
        {c.id: c.message for c in rep.checks if c.id.startswith("regen.")}
