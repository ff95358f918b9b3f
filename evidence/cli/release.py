"""`evidence freeze` and `evidence verify`: the CLI over evidence/release/.

The main CLI calls `register(app)`. This module only parses options and renders; the layout,
the manifests and every check live in evidence/release/. A refusal or a could-not-verify is one
paragraph on stderr and exit 2; a failed check is exit 1; a valid release exit 0.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from evidence.canon import dumps
from evidence.release.archive import archive_release
from evidence.release.catalog import write_catalog
from evidence.release.chain import supersession_text
from evidence.release.freeze import freeze as do_freeze
from evidence.release.layout import ReleaseError, printable
from evidence.release.regenerator import UNVERIFIED_FLAG
from evidence.release.verify import CHECK_IDS, VerifyReport, verify as do_verify

FREEZE_HELP = """Freeze complete runs into a tagged, checksummed, BagIt-compatible release.

Writes releases/<TAG>/ (bagit.txt, bag-info.txt, manifest-sha256.txt, tagmanifest-sha256.txt,
release.json, data/raw|analysis|figures|report/<run-id>/, data/provenance/<run-id>.json), a
deterministic releases/<TAG>.tar and its sha256 (releases/<TAG>.tar.sha256), commits the folder
and the sha256 (and releases/.gitignore when it must learn to ignore the tar; nothing else: the
tar is rebuilt from the folder byte for byte by `evidence archive releases/<TAG>`, so it is never
stored twice) and creates the annotated git tag TAG on that commit; the tag message carries the
sha256 of both manifests and of the tar.

The release holds exactly the runs you name. With no RUN, the tag names the spec (the tag without
its version: article1-v1.0 -> spec article1) and its one complete run under runs/ is frozen; when
there is none or more than one, the candidates are listed with their status and freeze refuses.
Analysis, figures and report are regenerated from the raw files, never copied. Refuses (exit 2)
a dirty git tree (untracked files count), what a killed freeze left in releases/, an existing tag
or release, a run that is not complete (status, planned trials), and any unredacted token, key or
password in the payload. SIGTERM or SIGHUP stop it with nothing left behind (exit 128 + signal).
Dates come from SOURCE_DATE_EPOCH, or the commit time of HEAD; never from the clock. Ends with
the command that publishes the release (git push <remote> <branch> <tag>)."""

VERIFY_HELP = f"""Verify a release folder (releases/<tag>) or its .tar, and say exactly what is wrong.

Runs every check, every time ({len(CHECK_IDS)} checks with stable ids): paths (links, devices,
'..', absolute, backslashes, names colliding after NFC/case folding), completeness both ways
(missing and unexpected files), fixity of payload and tag files (the tag manifest is required),
bag-info and Payload-Oxum, canonical release.json that agrees with the manifests, provenance
statements, the git tag (annotated, peels to the commit it names, message carries the manifest
digests, files equal the tagged commit's blobs) when the release sits in a git repository (or --repo
is given), and regeneration of analysis, figures and report from data/raw compared byte for byte
(for a PNG that differs: whether the pixels match and which render-environment versions differ).
Regeneration runs only after every other check has passed, and runs code from a release only when it is
exactly the code of a commit that a branch or tag of this clone (or of --repo) reaches: the wheel the
release carries (every entry the package's own, every file equal to that commit's, the commit the one
release.json names, dependencies only the pinned, hashed names the distribution declares), or for older
releases the commit that froze them; the report says which. Otherwise regeneration is not checked, and
the report says why and the command that would check it. A tag absent from this clone is not tampering:
it is reported prominently ("tag binding not checked", a skip, never a pass), the folder is compared
with what HEAD commits at its path instead (git.head), and it fails only with --require-tag.
release.json's tag must be the folder's name (and the archive's). A .tar is checked member by member
before anything is extracted, into a temporary folder.

Exit 0: valid (every check passed, regeneration included). 1: a check failed. 2: could not verify
(not a release, unreadable). 3: every check that ran passed, but regeneration was not checked: not
possible here (a copy outside a clone that holds its code), or run with --run-unverified-code."""

ARCHIVE_HELP = """Rebuild a release's .tar from its folder, byte for byte as freeze wrote it.

Freeze commits only the folder and releases/<TAG>.tar.sha256; this writes releases/<TAG>.tar
(or --out) again: sorted members, PAX format, uid/gid 0, modes 0755/0644, every mtime the
release's SOURCE_DATE_EPOCH (release.json freeze.source_date_epoch). The stream is hashed before
anything is written: when it does not match the committed .tar.sha256 nothing is written and the
exit code is 1 (`evidence verify` says which files changed). An existing file is never
overwritten: an identical one is reported as such, any other is refused (exit 2)."""

INDEX_HELP = """Write releases/README.md: every release with its one-line reading, its status and how to verify it.

Read from the release folders alone: release.json (date, runs, code), data/analysis/<run>/analysis.json
(each declared comparison as that release's analysis states it), data/release/notes.md (its title, and
"Erratum to TAG" sections). A release is "superseded by X" when X declares it (release.json
'supersedes', written by `freeze --supersedes`, or an erratum heading in its notes), else "current".
The same folders give the same bytes. --check writes nothing and exits 1 when the file is stale."""

_STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


def _reflow(text: str) -> str:
    # typer keeps hard line breaks; paragraphs must be single lines to wrap to the terminal
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))


def _short(v: Any, n: int = 100) -> str:
    s = v if isinstance(v, str) else dumps(v, indent=None).strip()
    return s if len(s) <= n else s[: n - 3] + "..."


class _Bars:
    """One rich progress bar per phase (checksums, archive, each run's regeneration), on stderr."""

    def __init__(self, console: Console):
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                            console=console, transient=True)
        self.tasks: dict[str, Any] = {}

    def start(self, key: str, title: str, total: float | None = None) -> None:
        self.tasks[key] = self.bar.add_task(escape(printable(title)), total=total)

    def advance(self, key: str, n: float = 1, title: str | None = None) -> None:
        if key in self.tasks:
            self.bar.update(self.tasks[key], advance=n, **({"description": escape(printable(title))} if title else {}))

    def finish(self, key: str, title: str | None = None) -> None:
        if key in self.tasks:
            t = self.tasks[key]
            total = self.bar.tasks[[x.id for x in self.bar.tasks].index(t)].total
            self.bar.update(t, total=total if total is not None else 1, completed=total if total is not None else 1,
                            **({"description": escape(printable(title))} if title else {}))


def print_report(rep: VerifyReport, console: Console) -> None:
    # every string here may quote a hostile name: printable() escapes undecodable bytes and control characters
    if rep.superseded:  # first: the reader of an old release must learn before anything else that it was corrected
        console.print(f"[bold yellow]{escape(printable(supersession_text(rep.superseded)))}[/]")
    t = Table(title=printable(f"verify {rep.path}" + (f" (tag {rep.tag})" if rep.tag else "")))
    t.add_column("check")
    t.add_column("status")
    t.add_column("result")
    for c in rep.checks:
        t.add_row(c.id, f"[{_STYLE[c.status]}]{c.status}[/]", escape(printable(c.message)))
    console.print(t)
    if rep.failed:
        console.print("[bold red]failures[/] (check, path: expected / found):")
        for c in rep.failed:
            console.print(f"  [bold]{c.id}[/]: {escape(printable(c.message))}")
            for f in c.findings[:50]:
                console.print(f"    {escape(printable(f.path))}: expected {escape(printable(_short(f.expected)))} / found "
                              f"{escape(printable(_short(f.found)))}"
                              + (f"  ({escape(printable(f.message))})" if f.message else ""), soft_wrap=True)
            if len(c.findings) > 50:
                console.print(f"    ... and {len(c.findings) - 50} more (--json lists all)")
    if rep.regen_env is not None and rep.regen_env.get("kind") not in ("unavailable", "refused"):
        console.print(f"regenerated with: {escape(printable(rep.regen_env['describe']))}")
    for note in rep.notes:
        console.print(f"[bold yellow]NOTE[/]: {escape(printable(note))}")
    counts = {s: sum(1 for c in rep.checks if c.status == s) for s in ("pass", "fail", "skip")}
    regen = rep.regeneration or {}
    if rep.ok and regen.get("state") == "not checked":
        console.print(f"[bold yellow]FIXITY VALID, REGENERATION NOT CHECKED[/]: {counts['pass']} checks passed, none failed; "
                      f"the derived files were not regenerated here: {escape(printable(regen.get('why') or ''))}")
        if regen.get("how"):
            console.print(f"to check them: {escape(printable(regen['how']))}", soft_wrap=True)
    elif rep.ok and regen.get("state") == "unverified":
        console.print(f"[bold red]NOT VERIFIED[/]: {counts['pass']} checks passed, none failed, but the derived files were "
                      f"regenerated by {escape(printable(regen.get('why') or ''))}")
    elif rep.ok:
        console.print(f"[bold green]VALID[/]: {counts['pass']} checks passed, {counts['skip']} skipped, none failed.")
    else:
        console.print(f"[bold red]NOT VALID[/]: {counts['fail']} check(s) failed, {counts['pass']} passed, {counts['skip']} skipped.")


def register(app: typer.Typer) -> None:
    """Add `freeze`, `archive` and `verify` to the given app."""
    from evidence.cli.common import err, fail, out

    @app.command("freeze", help=_reflow(FREEZE_HELP))
    def freeze(
        runs: Optional[List[Path]] = typer.Argument(None, metavar="RUN...",
                                                    help="Run directories (runs/<run-id>) to release (default: the one complete run of the spec the tag names)."),
        tag: str = typer.Option(..., "--tag", help="Release name: the git tag and the folder name (letters, digits, . _ -)."),
        releases_dir: Optional[Path] = typer.Option(None, "--releases-dir", help="Where releases go (default: releases/ at the repository root)."),
        repo: Optional[Path] = typer.Option(None, "--repo", help="The git repository (default: the one holding the current folder)."),
        allow: List[str] = typer.Option([], "--allow", help="Publish anyway despite: 'incomplete' (recorded in release.json)."),
        notes: Optional[Path] = typer.Option(None, "--notes", help="A Markdown file of your reading of the runs (an erratum "
                                             "of an earlier release, say): kept as data/release/notes.md and shown first "
                                             "on the release's index page."),
        supersedes: List[str] = typer.Option([], "--supersedes", metavar="OLD_TAG", help="An earlier release committed "
                                             "here that this one supersedes (release.json 'supersedes', bag-info "
                                             "'Supersedes'; `evidence verify releases/OLD_TAG` then says so first)."),
        erratum: Optional[Path] = typer.Option(None, "--erratum", help="A Markdown file: the erratum to the release "
                                               "--supersedes names, added to the notes under '## Erratum to OLD_TAG'."),
        compress_raw: bool = typer.Option(True, "--compress-raw/--no-compress-raw", help="Store the runs' request records, "
                                          "telemetry and server logs gzipped (deterministic: level 9, mtime 0, no name; "
                                          "release.json raw_compressed keeps each original's size and sha256)."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ) -> None:
        import git

        try:
            root = Path(repo) if repo else Path(git.Repo(Path.cwd(), search_parent_directories=True).working_tree_dir)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            fail(f"{Path.cwd()} is not inside a git repository; run freeze from the project (or pass --repo).")
        rdir = Path(releases_dir).resolve() if releases_dir else Path("releases")
        try:
            res = do_freeze(tag, [Path(r) for r in runs or []], root, releases_dir=rdir, allow=allow, notes=notes,
                            supersedes=supersedes, erratum=erratum, compress_raw=compress_raw,
                            say=lambda s: err.print(s, markup=False) if not as_json else None)
        except ReleaseError as e:
            fail(str(e), e.code)
        if as_json:
            sys.stdout.write(dumps(res.as_dict()))
            return
        out.print(f"[bold green]froze[/] {res.tag}: {len(res.runs)} run(s) ({', '.join(res.runs)}), {res.files} files, {res.bytes} bytes")
        for k, v in (("folder", res.release_dir), ("archive", res.tar_path), ("archive sha256", res.tar_sha256),
                     ("manifest sha256", res.manifest_sha256), ("tagmanifest sha256", res.tagmanifest_sha256),
                     ("commit", res.commit), ("tag", f"{res.tag} (annotated, object {res.tag_object})")):
            out.print(f"  {k:19} {v}", markup=False)
        out.print(f"check it with: evidence verify {res.release_dir}", markup=False)
        out.print(f"publish it with: {res.publish}", markup=False)

    @app.command("archive", help=_reflow(ARCHIVE_HELP))
    def archive(
        release: Path = typer.Argument(..., help="A release folder (releases/<tag>)."),
        out_path: Optional[Path] = typer.Option(None, "--out", help="Where to write the archive (default: releases/<tag>.tar beside the folder)."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ) -> None:
        try:
            res = archive_release(release, out_path)
        except ReleaseError as e:
            if as_json:
                sys.stdout.write(dumps({"release": printable(str(release)), "ok": False, "exit_code": e.code, "error": str(e)}))
                raise typer.Exit(e.code)
            fail(str(e), e.code)
        if as_json:
            sys.stdout.write(dumps({**res, "ok": True}))
            return
        what = "already there, identical" if res["existed"] else "written"
        out.print(f"{res['archive']}: {what}, sha256 {res['sha256']}", markup=False)
        if res["published_sha256"] is None:
            out.print(f"(no {Path(res['release']).name}.tar.sha256 beside the folder to compare with)", markup=False)
        else:
            out.print(f"matches {Path(res['release']).name}.tar.sha256", markup=False)

    releases_app = typer.Typer(help="The releases folder as a whole.", no_args_is_help=True)
    app.add_typer(releases_app, name="releases")

    @releases_app.command("index", help=_reflow(INDEX_HELP))
    def index(
        releases_dir: Path = typer.Option(Path("releases"), "--releases-dir", help="The folder holding the release folders."),
        check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 when README.md is not what the folders give."),
    ) -> None:
        try:
            path, changed = write_catalog(releases_dir, check=check)
        except ReleaseError as e:
            fail(str(e), e.code)
        if check and changed:
            fail(f"{path} is not what the release folders give; run `evidence releases index` and commit it.", 1)
        out.print(f"{path}: {'written' if changed else 'up to date'}", markup=False)

    @app.command("verify", help=_reflow(VERIFY_HELP))
    def verify(
        path: Path = typer.Argument(..., help="A release folder (releases/<tag>) or its .tar."),
        as_json: bool = typer.Option(False, "--json", help="Print every check as JSON (machine-readable)."),
        no_regen: bool = typer.Option(False, "--no-regen", help="Skip regenerating analysis, figures and report (reported as skipped)."),
        repo: Optional[Path] = typer.Option(None, "--repo", help="The git repository to check the tag in and to take the release's code from (default: the one holding PATH, if any)."),
        require_tag: bool = typer.Option(False, "--require-tag", help="Fail when the release's tag is not in the "
                                         "repository (by default an absent tag is reported, not failed: tags do not travel with every clone)."),
        regen_env: str = typer.Option("auto", "--regen-env", help="Regenerate with the release's own code ('auto': its "
                                      "wheel when bound to a commit a branch or tag of this repository reaches, or the "
                                      "commit that froze it), or with this code ('current')."),
        run_unverified: bool = typer.Option(False, UNVERIFIED_FLAG, help="Run the release's own code even when it is not "
                                            "bound to this repository (DANGEROUS: code the release's author chose runs "
                                            "as you; it could reproduce forged files). Never gives VALID: exit 3 at best."),
    ) -> None:
        if run_unverified:
            if regen_env != "auto":
                fail(f"{UNVERIFIED_FLAG} runs the release's own code; it cannot be combined with --regen-env {regen_env}.")
            regen_env = "unverified"
            err.print(f"WARNING: {UNVERIFIED_FLAG}: the release's own code will run as you even if it is not the code of a "
                      "commit in this repository. It can read and write your files, and it could reproduce forged "
                      "derived files, so the verdict cannot be VALID.", markup=False)
        elif regen_env not in ("auto", "current"):
            fail(f"unknown --regen-env {regen_env!r}; known: auto, current (the release's unbound code runs only with "
                 f"{UNVERIFIED_FLAG}).")
        bars = None if as_json or not err.is_terminal else _Bars(err)
        try:
            if bars is not None:
                with bars.bar:
                    rep = do_verify(path, repo=repo, regen=not no_regen, regen_env=regen_env, phases=bars,
                                    require_tag=require_tag)
            else:
                rep = do_verify(path, repo=repo, regen=not no_regen, regen_env=regen_env, require_tag=require_tag)
        except ReleaseError as e:
            if as_json:
                sys.stdout.write(dumps({"path": printable(str(path)), "ok": False, "exit_code": e.code, "error": str(e)}))
                raise typer.Exit(e.code)
            fail(str(e), e.code)
        if as_json:
            sys.stdout.write(dumps(rep.as_dict()))
        else:
            print_report(rep, out)
        raise typer.Exit(rep.exit_code)
