"""`freeze`: runs -> releases/<tag>/, its deterministic tar, one commit and an annotated tag."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from evidence import __version__
from evidence.canon import write_atomic
from evidence.release.archive import build_tar
from evidence.release.candidates import publish_command, runs_for_tag
from evidence.release.catalog import CATALOG, render_catalog
from evidence.release.chain import check_supersedes, erratum_section
from evidence.release.compress import METHOD as COMPRESS_METHOD, NAMES as COMPRESS_NAMES, compress_raw as compress_raw_files
from evidence.release.files import inventory
from evidence.release.layout import (ALLOW_VALUES, CRATE, DERIVED_ROLES, FORMAT, MANIFEST, NOTES, PAYLOAD_DIR, RELEASE_DIR,
                                     REGEN_FUNCTIONS,
                                     RELEASE_JSON, ROLE_DOC, TAG_NAME, TAGMANIFEST, ReleaseError, dig,
                                     freeze_name_problems, path_problems, payload_path, sha256_bytes)
from evidence.release.metadata import iso_utc, seal
from evidence.release.regen import copy_tree_files, current_render_environment, regenerate, regenerate_release
from evidence.release.regenerator import build_regenerator
from evidence.release.staging import (STAGING_MARK, Interrupted, critical, interruptible, make_staging, placing_mark,
                                      signal_name, stale_staging)
from evidence.rundir import ABORTED, PROVENANCE_GLOB, RUN_JSON, TMP_PREFIX, RunDir
from evidence.secrets import scan_files


@dataclass
class FreezeResult:
    tag: str
    release_dir: Path
    tar_path: Path
    tar_sha256: str
    manifest_sha256: str
    tagmanifest_sha256: str
    release_json_sha256: str
    commit: str
    tag_object: str
    runs: list[str]
    files: int
    bytes: int
    publish: str  # the command that publishes the release (the branch and the tag)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["release_dir"], d["tar_path"] = str(self.release_dir), str(self.tar_path)
        return d


def _read_json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ReleaseError(f"{path} could not be read as JSON ({e}).")


def run_code(run_path: Path, run_json: dict) -> dict:
    """The code commit(s) a run ran at, from run.json and its provenance*.json files."""
    commits, dirty, sources = [], [], []
    cands = [(run_json, RUN_JSON)] + [(_read_json_file(p), p.name) for p in sorted(run_path.glob(PROVENANCE_GLOB))]
    for doc, name in cands:
        for keys in (("git", "commit"), ("code", "commit"), ("code_commit",), ("commit",), ("git", "sha")):
            v = dig(doc, *keys)
            if isinstance(v, str) and re.fullmatch(r"[0-9a-f]{7,64}", v):
                if v not in commits:
                    commits.append(v)
                sources.append(f"{name}:{'.'.join(keys)}")
                break
        for keys in (("git", "dirty"), ("code", "dirty")):
            v = dig(doc, *keys)
            if isinstance(v, bool):
                dirty.append(v)
                break
    return {"commits": commits, "dirty": any(dirty) if dirty else None, "from": sources}


def inspect_run(run_path: Path, allow: frozenset[str]) -> dict:
    """What release.json says about a run; refuses a run that is not complete unless allowed."""
    run_path = Path(run_path)
    rd = RunDir(run_path)
    if not run_path.is_dir() or not rd.run_json.is_file():
        raise ReleaseError(f"{run_path} is not a run directory (no run.json); give folders under runs/ that `evidence run` wrote.")
    info = _read_json_file(rd.run_json)
    status = info.get("status")
    if not rd.plan_json.is_file():
        raise ReleaseError(f"{run_path} has no plan.json, so which trials must exist cannot be checked; refusing to freeze it.")
    plan = _read_json_file(rd.plan_json)
    planned = [t.get("id") for t in plan.get("trials", [])] if isinstance(plan, dict) else []
    present = rd.completed_trials()
    missing = [t for t in planned if t not in present]
    unfinished = sorted(p.name for p in rd.trials_dir.glob(TMP_PREFIX + "*")) if rd.trials_dir.exists() else []
    problems = []
    if status != "complete":
        problems.append(f"its status is {status!r}, not 'complete'")
    if missing:
        problems.append(f"planned trial(s) {', '.join(missing)} are missing")
    if unfinished:
        problems.append(f"unfinished trial folder(s) {', '.join(unfinished)} are present (resume the run to set them aside)")
    if problems and "incomplete" not in allow:
        raise ReleaseError(f"run {rd.id} is not complete: {'; '.join(problems)}. Finish or resume the run "
                           "(`evidence run --resume`) before freezing it, or pass --allow incomplete to publish it as incomplete.")
    spec_sha = sha256_bytes(rd.spec_yaml.read_bytes()) if rd.spec_yaml.is_file() else None
    if info.get("spec_sha256") and spec_sha and info["spec_sha256"] != spec_sha:
        raise ReleaseError(f"run {rd.id}: run.json says spec sha256 {info['spec_sha256'][:12]}... but spec.yaml hashes to "
                           f"{spec_sha[:12]}...; the raw files were changed after the run. Refusing to freeze it.")
    return {
        "id": rd.id,
        "status": status,
        "spec": {"name": info.get("spec_name"), "sha256": spec_sha,
                 "resolved_sha256": sha256_bytes(rd.spec_resolved.read_bytes()) if rd.spec_resolved.is_file() else None},
        "plan_sha256": sha256_bytes(rd.plan_json.read_bytes()),
        "code": run_code(run_path, info),
        "trials": {"planned": len(planned), "present": present, "missing": missing},
        "aborted": sorted(p.name for p in (run_path / ABORTED).iterdir()) if (run_path / ABORTED).is_dir() else [],
        "problems_allowed": problems,
    }


def _git_repo(repo_root: Path) -> Any:
    import git  # GitPython

    try:
        repo = git.Repo(repo_root)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise ReleaseError(f"{repo_root} is not a git repository; a release is committed and tagged, so freeze runs inside one.")
    try:
        head = repo.head.commit
    except ValueError:
        raise ReleaseError(f"{repo_root} has no commit yet (or git refuses to read it: 'dubious ownership' - see "
                           "`git config --global --add safe.directory`); make a first commit before freezing.")
    return repo, head


def source_date_epoch(head_commit: Any) -> tuple[int, str]:
    v = os.environ.get("SOURCE_DATE_EPOCH")
    if v:
        if not v.isdigit():
            raise ReleaseError(f"SOURCE_DATE_EPOCH={v!r} is not a whole number of seconds since 1970; unset it or fix it.")
        return int(v), "SOURCE_DATE_EPOCH"
    return int(head_commit.committed_date), f"commit time of {head_commit.hexsha}"


def _refuse_bad_payload(staging: Path, workers: int | None) -> None:
    """Names every filesystem and BagIt tool can hold, and no secret: nothing publishable may carry one."""
    inv = inventory(staging / PAYLOAD_DIR)
    bad = [(f"{PAYLOAD_DIR}/{r}", why) for r in inv.files if (why := freeze_name_problems(r))]
    pp = path_problems((f"{PAYLOAD_DIR}/{r}", "payload") for r in inv.files)
    bad += [(f.path, f.message) for fs in pp.values() for f in fs]
    if bad:
        raise ReleaseError("file names in the payload cannot be released: "
                           + "; ".join(f"{p!r} {w}" for p, w in bad[:8]) + ". Rename them in the run directory.")
    secrets = scan_files(staging / PAYLOAD_DIR, inv.files, workers=workers)
    if secrets:
        raise ReleaseError(f"found {len(secrets)} unredacted secret(s) in the payload: "
                           + "; ".join(f"data/{s}" for s in secrets[:8]) + (" ..." if len(secrets) > 8 else "")
                           + ". Redact them in the run directory (values shown masked) and freeze again.")


ARCHIVE_IGNORE = "/*.tar"


def _ignore_archives(repo: Any, releases: Path, tar_path: Path) -> tuple[list[Path], str | None]:
    """Make the archive beside the folder an ignored file (so the tree stays clean for the next freeze):
    releases/.gitignore gets the rule when git does not ignore it yet. Returns (the file to commit, if changed;
    its text before, None when it was new)."""
    import git

    try:
        repo.git.check_ignore("-q", str(tar_path))
        return [], None
    except git.GitCommandError:  # exit 1: not ignored
        pass
    gi = releases / ".gitignore"
    was = gi.read_text(encoding="utf-8") if gi.is_file() else None
    old = was if was is not None else ("# release archives: rebuilt from their folders by "
                                                               "`evidence archive releases/NAME`; only NAME.tar.sha256 is committed\n")
    write_atomic(gi, old + ("" if old.endswith("\n") or not old else "\n") + ARCHIVE_IGNORE + "\n")
    return [gi], was


def _write_index(releases: Path, say: Callable[[str], None]) -> tuple[list[Path], str | None]:
    """releases/README.md with the new release in it (release.catalog), committed with it. Returns (the file, if
    changed; its text before, None when new). An index that cannot be built never stops a release: it is said."""
    out = releases / CATALOG
    was = out.read_text(encoding="utf-8") if out.is_file() else None
    try:
        text = render_catalog(releases)
    except Exception as e:  # a folder beside it this code cannot read: the release stands, the index waits
        say(f"releases/{CATALOG} not updated ({type(e).__name__}: {e}); run `evidence releases index` and commit it")
        return [], None
    if text == was:
        return [], None
    write_atomic(out, text)
    return [out], was


def tag_message(tag: str, commit: str | None, digests: dict[str, str], tar_sha: str) -> str:
    lines = [f"evidence release {tag}", ""]
    lines += [f"{name} sha256:{digests[name]}" for name in (MANIFEST, TAGMANIFEST, RELEASE_JSON)]
    lines.append(f"{tag}.tar sha256:{tar_sha}")
    if commit:
        lines.append(f"commit {commit}")
    return "\n".join(lines) + "\n"


MAX_NOTES_BYTES = 1 << 20


def read_notes(path: Path, flag: str = "--notes") -> str:
    """The author's notes file: UTF-8 Markdown of at most 1 MiB, with no secret in it."""
    p = Path(path)
    if not p.is_file():
        raise ReleaseError(f"{flag} {p}: no such file; give a Markdown file of the release's reading (or erratum).")
    if p.stat().st_size > MAX_NOTES_BYTES:
        raise ReleaseError(f"{flag} {p} is {p.stat().st_size:,} bytes; release notes are at most {MAX_NOTES_BYTES:,}.")
    try:
        return p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ReleaseError(f"{flag} {p} is not UTF-8 text.") from None


def freeze(
    tag: str,
    runs: list[Path] | None,
    repo_root: Path,
    *,
    releases_dir: str | Path = "releases",
    runs_dir: str | Path = "runs",
    allow: Iterable[str] = (),
    workers: int | None = None,
    say: Callable[[str], None] = lambda s: None,
    notes: Path | None = None,
    supersedes: Iterable[str] = (),
    erratum: Path | None = None,
    compress_raw: bool = False,
) -> FreezeResult:
    """Freeze runs into releases/<tag>/, a deterministic releases/<tag>.tar (+ .tar.sha256), one commit
    holding the folder and the .tar.sha256 (the .tar is left beside it, ignored by git: `evidence archive`
    rebuilds it byte for byte), and an annotated tag <tag> on it whose message carries the manifest digests.
    With no runs, the one complete run of the spec the tag names (candidates.runs_for_tag).
    Refuses (ReleaseError, exit 2): a dirty tree (untracked files count), what a killed freeze left in
    releases/, an existing tag or release, a run that is not complete, any secret in the payload.
    SIGTERM or SIGHUP remove everything written so far (ReleaseError, exit 128 + the signal).
    `notes`: a Markdown file of the author's words (a reading, an erratum), kept as data/release/notes.md
    and shown first on the release's index page. `supersedes`: tags of releases committed here that this one
    supersedes (release.json "supersedes", bag-info "Supersedes"); `erratum`: a Markdown file appended to the notes
    under "## Erratum to OLD" (one --supersedes with it). `compress_raw`: store the run's large text files gzipped
    (release.compress; release.json raw_compressed names each original's size and sha256)."""
    state: dict = {}
    try:
        with interruptible(state):
            return _freeze(tag, runs, repo_root, releases_dir=releases_dir, runs_dir=runs_dir, allow=allow,
                           workers=workers, say=say, state=state, notes=notes, supersedes=list(supersedes), erratum=erratum,
                           compress_raw=compress_raw)
    except Interrupted as e:
        raise ReleaseError(f"freeze of {tag} was interrupted by {signal_name(e.signum)}; nothing was released: the staging "
                           "folder and any release files were removed, nothing was committed or tagged.", 128 + e.signum) from None


def _freeze(tag: str, runs: list[Path] | None, repo_root: Path, *, releases_dir: str | Path, runs_dir: str | Path,
            allow: Iterable[str], workers: int | None, say: Callable[[str], None], state: dict,
            notes: Path | None = None, supersedes: list[str] | None = None, erratum: Path | None = None,
            compress_raw: bool = False) -> FreezeResult:
    allow = frozenset(allow)
    supersedes = list(dict.fromkeys(supersedes or []))
    notes_text = read_notes(notes) if notes is not None else None
    if erratum is not None:
        if len(supersedes) != 1:
            raise ReleaseError(f"--erratum {erratum} corrects one earlier release: give it with exactly one --supersedes OLD_TAG "
                               f"(given: {len(supersedes)}).")
        section = erratum_section(supersedes[0], read_notes(erratum, "--erratum"))
        notes_text = section if notes_text is None else notes_text.rstrip("\n") + "\n\n" + section
    if allow - set(ALLOW_VALUES):
        raise ReleaseError(f"unknown --allow value(s) {', '.join(sorted(allow - set(ALLOW_VALUES)))}; known: {', '.join(ALLOW_VALUES)}.")
    if not TAG_NAME.fullmatch(tag) or ".." in tag or tag.endswith(".lock"):
        raise ReleaseError(f"{tag!r} is not a usable release tag: use letters, digits, '.', '_' and '-' (it is both a git tag and a folder name).")
    repo_root = Path(repo_root).resolve()
    repo, head = _git_repo(repo_root)
    import git

    rel_dir = Path(releases_dir)
    releases = (rel_dir if rel_dir.is_absolute() else repo_root / rel_dir).resolve()
    stale = stale_staging(releases)
    if stale:
        raise ReleaseError(f"a freeze that was killed left {'; '.join(what for what, _ in stale)}. Nothing in it was "
                           f"released; remove it (rm -rf {' '.join(p for _, ps in stale for p in ps)}) and freeze again.")
    if not runs:
        rdir = Path(runs_dir) if Path(runs_dir).is_absolute() else repo_root / runs_dir
        runs = runs_for_tag(tag, rdir)
        say(f"tag {tag}: freezing {', '.join(p.name for p in runs)}, the complete run of its spec")

    try:
        dirty = repo.is_dirty(untracked_files=True)
    except git.GitCommandError as e:
        raise ReleaseError(f"git could not read {repo_root} ({e.stderr.strip() if e.stderr else e}); fix the repository first.")
    if dirty:
        changed = repo.git.status("--porcelain").splitlines()
        raise ReleaseError(f"the git tree at {repo_root} is dirty ({len(changed)} change(s), untracked files count: "
                           f"{'; '.join(changed[:8])}{'; ...' if len(changed) > 8 else ''}). A release names the code it was made with, "
                           "so commit or remove these first.")
    if f"refs/tags/{tag}" in {r.path for r in repo.tags}:
        raise ReleaseError(f"tag {tag!r} already exists (at {repo.tags[tag].commit.hexsha[:12]}); a release tag is never moved. "
                           "Choose a new tag.")
    if repo_root not in releases.parents and releases != repo_root:
        raise ReleaseError(f"the releases folder {releases} is outside the repository {repo_root}; it must be inside to be committed.")
    sup_meta = check_supersedes(supersedes, tag, repo, releases, repo_root)
    for sm in sup_meta:
        sm["erratum"] = f"{PAYLOAD_DIR}/{RELEASE_DIR}/{NOTES}" if erratum is not None else None
    final = releases / tag
    tar_path, sha_path = releases / f"{tag}.tar", releases / f"{tag}.tar.sha256"
    for p in (final, tar_path, sha_path):
        if p.exists() or p.is_symlink():
            raise ReleaseError(f"{p} already exists; a release is never overwritten. Choose a new tag.")
    run_paths = [Path(r).resolve() for r in runs]
    ids = [p.name for p in run_paths]
    if len(set(ids)) != len(ids):
        raise ReleaseError(f"two runs share a run id ({', '.join(sorted({i for i in ids if ids.count(i) > 1}))}); run ids name folders in the release.")
    run_infos = [inspect_run(p, allow) for p in run_paths]
    sde, sde_from = source_date_epoch(head)
    try:
        render_env = current_render_environment()
    except ImportError as e:
        raise ReleaseError(f"the figures module is not available ({e}); freeze regenerates figures, so it needs it.")

    made_releases = not releases.exists()
    releases.mkdir(parents=True, exist_ok=True)
    staging = make_staging(releases, tag)
    created: list[Path] = []
    try:
        # 1. raw, copied byte for byte (derived folders are never copied: they are regenerated);
        #    names and secrets are checked on raw first, so a refusal comes before the slow part
        for p in run_paths:
            copy_tree_files(p, staging / payload_path("raw", p.name), skip_top=DERIVED_ROLES)
            say(f"copied raw files of {p.name}")
        _refuse_bad_payload(staging, workers)
        # 1b. the large text files stored gzipped (after the secret scan, which reads text); regenerated from as stored
        originals = []
        if compress_raw:
            for p in run_paths:
                originals += compress_raw_files(staging / payload_path("raw", p.name), payload_path("raw", p.name).rstrip("/"))
            say(f"compressed {len(originals)} raw file(s) ({COMPRESS_METHOD})")
        # 2. derived, regenerated from the copied raw exactly as verify will
        work = staging / ".work"
        for p in run_paths:
            outs = regenerate(staging / payload_path("raw", p.name), work, sde=sde)
            for role in DERIVED_ROLES:
                o = outs[role]
                if isinstance(o, Exception):
                    raise ReleaseError(f"regenerating {role} of run {p.name} failed ({type(o).__name__}: {o}); nothing was released.")
                inv = inventory(o)
                if inv.symlinks or inv.special:
                    raise ReleaseError(f"regenerating {role} of {p.name} produced links or special files; refusing.")
                if inv.files:
                    dest = staging / payload_path(role, p.name)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(o, dest)
            say(f"regenerated analysis, figures and report of {p.name}")
        # release level: the author's notes as given, then the index over every run, the compare and the RO-Crate,
        # regenerated from the payload exactly as verify will (regen.release)
        if notes_text is not None:
            write_atomic(staging / PAYLOAD_DIR / RELEASE_DIR / NOTES, notes_text)
        outs = regenerate_release(staging / PAYLOAD_DIR, work, sde=sde, tag=tag)
        for role, o in outs.items():
            if isinstance(o, Exception):
                raise ReleaseError(f"building the release's {role} files failed ({type(o).__name__}: {o}); nothing was released.")
        (staging / PAYLOAD_DIR / RELEASE_DIR).mkdir(parents=True, exist_ok=True)
        for f in sorted(outs["release"].iterdir()):
            os.replace(f, staging / PAYLOAD_DIR / RELEASE_DIR / f.name)
        os.replace(outs["crate"] / CRATE, staging / PAYLOAD_DIR / CRATE)
        say("wrote the release's index page, the compare of its runs and its RO-Crate metadata")
        # the release carries its regenerator (tag files): a wheel of this code and the lock of its render stack
        build_regenerator(staging, sde=sde)
        say("built the release's regenerator (a wheel of this code and the lock of its render stack)")
        shutil.rmtree(work)
        # 3. the whole payload again, now with the regenerated files
        _refuse_bad_payload(staging, workers)
        # 4. metadata and manifests
        meta = {
            "format": FORMAT,
            "tag": tag,
            "repo_path": final.relative_to(repo_root).as_posix(),
            "tool": {"name": "evidence", "version": __version__},
            "freeze": {"code_commit": head.hexsha, "source_date_epoch": sde, "date": iso_utc(sde), "date_from": sde_from,
                       "allowed": sorted(allow)},
            "render_environment": render_env,
            "roles": ROLE_DOC,
            "runs": run_infos,
            "regenerate": {
                "steps": [f"git checkout {tag}", "python -m pip install -e .", f"evidence verify {final.relative_to(repo_root).as_posix()}"],
                "how": ("verify copies data/raw/<run-id>/ to a temporary folder named <run-id>, calls the functions below in "
                        "order with SOURCE_DATE_EPOCH set to freeze.source_date_epoch, and compares every output byte for byte "
                        "with data/<role>/<run-id>/"),
                "functions": REGEN_FUNCTIONS,
            },
        }
        if sup_meta:
            meta["supersedes"] = sup_meta
        if originals:
            meta["raw_compressed"] = {"method": COMPRESS_METHOD, "names": list(COMPRESS_NAMES), "originals": originals}
        meta = seal(staging, meta, workers=workers)
        digests = {n: sha256_bytes((staging / n).read_bytes()) for n in (MANIFEST, TAGMANIFEST, RELEASE_JSON)}
        # 5. into place, then the archive beside it
        placing = placing_mark(releases, tag, [final, tar_path, sha_path])
        created.append(placing)
        (staging / STAGING_MARK).unlink()
        os.replace(staging, final)
        created.append(final)
        created.append(tar_path)
        tar_sha = build_tar(final, tar_path, mtime=sde)
        created.append(sha_path)
        write_atomic(sha_path, f"{tar_sha}  {tar_path.name}\n")
        say(f"wrote {final} and {tar_path} (sha256 {tar_sha})")
        # 6. commit the folder and the tar's sha256 (the tar is rebuilt from the folder byte for byte by
        #    `evidence archive`: committing it too would store every byte twice); then the annotated tag
        n_files = len(meta["files"])
        n_bytes = sum(f["bytes"] for f in meta["files"])
        msg = (f"release {tag}: {', '.join(ids)}\n\nFrozen by evidence {__version__} from {head.hexsha}.\n"
               f"{n_files} payload files, {n_bytes} bytes.\n\n" + tag_message(tag, None, digests, tar_sha).split("\n", 2)[2])
        with critical(state):  # SIGTERM/SIGHUP wait: the commit and its tag go together
            ignore, ignore_was = _ignore_archives(repo, releases, tar_path)
            index, index_was = _write_index(releases, say)
            paths = [str(p.relative_to(repo_root)) for p in (final, sha_path, *ignore, *index)]
            try:
                repo.git.add("-f", "--", *paths)
                repo.git.commit("--no-verify", "-q", "-m", msg, "--", *paths)
            except git.GitCommandError as e:
                with contextlib.suppress(git.GitCommandError):
                    repo.git.reset("-q", "--", *paths)
                for p, was in [(p, ignore_was) for p in ignore] + [(p, index_was) for p in index]:
                    if was is not None:  # the ignore rule and the index go with the release they were written for
                        write_atomic(p, was)
                    else:
                        p.unlink()
                raise ReleaseError(f"git could not commit the release ({(e.stderr or str(e)).strip()}); nothing was committed or tagged. "
                                   "Set user.name and user.email if git asks for them.")
            created.clear()  # committed: never removed from here on
            placing.unlink()
            commit = repo.head.commit
            if [c.hexsha for c in commit.parents] != [head.hexsha]:
                raise ReleaseError(f"the release commit {commit.hexsha[:12]} does not follow {head.hexsha[:12]} (another commit raced it); "
                                   "the release is committed but not tagged. Inspect the history and tag it by hand.")
            tag_ref = repo.create_tag(tag, ref=commit, message=tag_message(tag, commit.hexsha, digests, tar_sha))
        if tag_ref.tag is None:
            raise ReleaseError(f"git created a lightweight tag {tag}; an annotated tag was required.")
        return FreezeResult(tag, final, tar_path, tar_sha, digests[MANIFEST], digests[TAGMANIFEST], digests[RELEASE_JSON],
                            commit.hexsha, tag_ref.tag.hexsha, ids, n_files, n_bytes, publish_command(repo, tag))
    finally:
        state["critical"] = True  # a second signal must not cut the cleanup short
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        for p in created:
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
        if made_releases:
            with contextlib.suppress(OSError):
                releases.rmdir()  # only when empty
        state["critical"] = False
