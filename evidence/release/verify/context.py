"""What every check shares (the inventory, manifests, digests, release.json, the repository), computed
once; the result types; the `check` decorator."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from evidence.release.files import FileDigest, Inventory, HashProgress, hash_files, inventory
from evidence.release.layout import (BAG_INFO, DERIVED_ROLES, MANIFEST, PAYLOAD_DIR, RELEASE_JSON, TAG_READ_LIMIT,
                                     TAGMANIFEST, Finding, dig, path_key, payload_path, printable_tree)
from evidence.release.manifest import ManifestEntry, parse_manifest
from evidence.release.phases import NoPhases, Phases
from evidence.release.regen import run_regeneration
from evidence.release.regenerator import UNVERIFIED_FLAG, RegenEnv, resolve


@dataclass
class CheckResult:
    id: str
    title: str
    status: str  # pass | fail | skip
    message: str = ""
    findings: list[Finding] = field(default_factory=list)

    @property
    def path(self) -> str | None:
        return self.findings[0].path if self.findings else None

    @property
    def expected(self) -> Any:
        return self.findings[0].expected if self.findings else None

    @property
    def found(self) -> Any:
        return self.findings[0].found if self.findings else None

    def as_dict(self) -> dict:
        return printable_tree({"id": self.id, "title": self.title, "status": self.status, "message": self.message,
                               "path": self.path, "expected": self.expected, "found": self.found,
                               "findings": [f.as_dict() for f in self.findings]})


@dataclass
class VerifyReport:
    path: str
    release_dir: str | None
    tag: str | None
    checks: list[CheckResult]
    regen_env: dict | None = None  # which code and interpreter regenerated (RegenEnv.as_dict()), when regeneration ran
    notes: list[str] = field(default_factory=list)  # what was not checked, said beside the verdict
    regeneration: dict | None = None  # {"state", "why", "how"}: whether regeneration was checked, and how it could be
    superseded: dict | None = None  # a newer release beside this one declares it supersedes it (chain.supersession)

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def regen_unchecked(self) -> bool:
        """Every check passed or was skipped, but regeneration was asked for and not checked by trusted code."""
        return (self.regeneration or {}).get("state") in ("not checked", "unverified")

    @property
    def exit_code(self) -> int:
        """0 valid; 1 a check failed; 3 every other check passed but regeneration was not checked (not possible
        here, or run with the release's own unverified code). 2 (could not verify at all) is a ReleaseError."""
        if not self.ok:
            return 1
        return EXIT_REGEN_UNCHECKED if self.regen_unchecked else 0

    def by_id(self) -> dict[str, CheckResult]:
        return {c.id: c for c in self.checks}

    def as_dict(self) -> dict:
        counts = {s: sum(1 for c in self.checks if c.status == s) for s in ("pass", "fail", "skip")}
        return printable_tree({"superseded": self.superseded, "path": self.path, "release_dir": self.release_dir, "tag": self.tag, "ok": self.ok,
                               "exit_code": self.exit_code, "counts": counts, "regen_env": self.regen_env, "notes": self.notes,
                               "regeneration": self.regeneration, "checks": [c.as_dict() for c in self.checks]})


EXIT_REGEN_UNCHECKED = 3


class VerifyContext:
    """What the checks share, computed once: the inventory, manifests, digests, release.json, repo."""

    def __init__(self, root: Path | None, source: Path, *, repo: Any, regen: bool, workers: int | None,
                 progress: HashProgress | None, archive_problems: list[Finding] | None, is_archive: bool,
                 regen_env: str = "auto", phases: Phases | None = None, require_tag: bool = False):
        self.root, self.source, self.regen_enabled = root, source, regen
        self.require_tag = require_tag
        self.notes: list[str] = []  # said prominently beside the verdict (e.g. the tag binding was not checked)
        self.workers, self.phases = workers, phases or NoPhases()
        self.progress = progress or _bytes_phase(self.phases, "checksums", "checksums")
        self.archive_problems, self.is_archive = archive_problems, is_archive
        self.inv = inventory(root) if root is not None else Inventory()
        self.manifest, self.manifest_problems, self.manifest_state = self._manifest(MANIFEST)
        self.tagmanifest, self.tagmanifest_problems, self.tagmanifest_state = self._manifest(TAGMANIFEST)
        self.meta, self.meta_error, self.meta_bytes = self._meta()
        self.tag = (self.meta or {}).get("tag") if isinstance(self.meta, dict) else None
        if not isinstance(self.tag, str) and root is not None:
            self.tag = root.name
        self.repo, self.repo_error = self._repo(repo)
        self.path_problems_cache: dict[str, list[Finding]] | None = None
        self.regen_env_mode = regen_env
        # regeneration runs the release's own code: only after every cheap check has passed (verify sets
        # gate_failures before the regen.* checks), resolved and run on first use, in this temporary folder
        self.gate_failures: list[str] | None = None
        self._regen_tmp: tempfile.TemporaryDirectory | None = None
        self._env: RegenEnv | None = None
        self._regen_out: dict[str, dict[str, Path | Exception]] | None = None
        self.digests: dict[str, FileDigest | OSError] = {}
        # path -> why it was not hashed: decided from names and sizes alone, before anything is read
        self.unhashed: dict[str, str] = self._refused() if root is not None else {}
        if root is not None:
            self.digests = hash_files(root, [p for p in self.inv.files if p not in self.unhashed],
                                      git_blob=self.repo is not None, workers=workers, progress=self.progress)
            self.phases.finish("checksums")

    def _refused(self) -> dict[str, str]:
        """Files never to read: unlisted ones, and listed ones whose size on disk is not the size declared (by
        release.json per file, by the Payload-Oxum in total, by TAG_READ_LIMIT for a tag file). Costs a stat,
        already done by the inventory: an unlisted 1 TiB sparse file is refused in no time."""
        out: dict[str, str] = {}
        declared: dict[str, int] = {}
        if isinstance(self.meta, dict) and isinstance(self.meta.get("files"), list):
            declared = {x["path"]: x["bytes"] for x in self.meta["files"] if isinstance(x, dict)
                        and isinstance(x.get("path"), str) and type(x.get("bytes")) is int}
        payload: dict[str, int] = {}
        for p, st in self.inv.files.items():
            if p.startswith(PAYLOAD_DIR + "/"):
                if p not in self.manifest:
                    out[p] = f"not listed in {MANIFEST}: refused unread"
                elif p in declared and st.st_size != declared[p]:
                    out[p] = f"{st.st_size} bytes on disk, {declared[p]} declared in {RELEASE_JSON}: refused unread"
                else:
                    payload[p] = st.st_size
            elif p != TAGMANIFEST and p not in self.tagmanifest:
                out[p] = f"not listed in {TAGMANIFEST}: refused unread"
            elif st.st_size > TAG_READ_LIMIT:
                out[p] = f"{st.st_size} bytes, more than any tag file freeze writes ({TAG_READ_LIMIT}): refused unread"
        oxum = self.payload_oxum()
        if oxum is not None and sum(payload.values()) > oxum[0]:
            why = (f"the listed payload files hold {sum(payload.values())} bytes, more than the Payload-Oxum's {oxum[0]}: "
                   "refused unread")
            out.update(dict.fromkeys(payload, why))
        return out

    def read_small(self, rel: str) -> bytes | None:
        """A tag file's bytes, or None when it is larger than TAG_READ_LIMIT (never read into memory)."""
        st = self.inv.files.get(rel)
        if st is not None and st.st_size > TAG_READ_LIMIT:
            return None
        with open(self.root / rel, "rb") as f:
            return f.read(TAG_READ_LIMIT + 1)

    def payload_oxum(self) -> tuple[int, int] | None:
        """(bytes, files) of bag-info.txt's one Payload-Oxum, or None when it has not exactly one readable."""
        if self.root is None or BAG_INFO not in self.inv.files:
            return None
        b = self.read_small(BAG_INFO)
        vals = re.findall(r"(?m)^Payload-Oxum:\s*([0-9]+)\.([0-9]+)\s*$", (b or b"").decode("utf-8", "replace"))
        return (int(vals[0][0]), int(vals[0][1])) if len(vals) == 1 else None

    def _manifest(self, name: str) -> tuple[dict[str, ManifestEntry], list[Finding], str]:
        if self.root is None or name not in self.inv.files:
            present = self.root is not None and (name in self.inv.symlinks or name in self.inv.special)
            return {}, [], "not a regular file" if present else "missing"
        data = self.read_small(name)
        if data is None:
            return {}, [], f"too large to be a manifest ({self.inv.files[name].st_size} bytes; not read)"
        entries, problems = parse_manifest(data, name)
        return {e.path: e for e in entries}, problems, "ok"

    def _meta(self) -> tuple[dict | None, str | None, bytes | None]:
        if self.root is None or RELEASE_JSON not in self.inv.files:
            return None, f"{RELEASE_JSON} is missing", None
        b = self.read_small(RELEASE_JSON)
        if b is None:
            return None, f"{RELEASE_JSON} is too large ({self.inv.files[RELEASE_JSON].st_size} bytes; not read)", None
        try:
            m = json.loads(b.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: hostile nesting
            return None, f"{RELEASE_JSON} is not valid JSON ({type(e).__name__}: {e})", b
        if not isinstance(m, dict):
            return None, f"{RELEASE_JSON} is not a JSON object", b
        return m, None, b

    def _repo(self, repo: Any) -> tuple[Any, str | None]:
        import git

        if repo is not None and not isinstance(repo, (str, os.PathLike)):
            return repo, None
        start = Path(repo) if repo is not None else (self.source.parent if self.is_archive else self.source)
        try:
            return git.Repo(start, search_parent_directories=repo is None), None
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            if repo is not None:
                return None, f"{repo} is not a git repository"
            return None, None

    # --- helpers
    def sha(self, rel: str) -> str | None:
        d = self.digests.get(rel)
        return d.sha256 if isinstance(d, FileDigest) else None

    def payload_files(self) -> list[str]:
        return [p for p in self.inv.files if p.startswith(PAYLOAD_DIR + "/")]

    def _work(self) -> Path:
        if self._regen_tmp is None:
            self._regen_tmp = tempfile.TemporaryDirectory(prefix="evidence-regen-")
        return Path(self._regen_tmp.name)

    def regen_env(self) -> RegenEnv:
        """The regenerating environment (resolved once; runs nothing from the release)."""
        if self._env is None:
            code_repo = None
            with contextlib.suppress(Exception):
                import git

                code_repo = git.Repo(Path(__file__).resolve().parent, search_parent_directories=True)
            self.phases.start("regen-env", "preparing the regenerating environment")
            try:
                self._env = resolve(self.regen_env_mode, self.root, self.meta, [self.repo, code_repo], self._work() / "code")
            except Exception as e:  # said by regen.code, never a traceback
                self._env = RegenEnv("refused", "none", error=f"could not prepare it ({type(e).__name__}: {e})")
            self.phases.finish("regen-env", f"regenerating with: {self._env.kind}")
        return self._env

    @property
    def regen_blocked(self) -> str | None:
        """Why regeneration does not run (None: it runs): not asked for, an earlier check failed, or the code
        is refused or not bound here."""
        if not self.regen_enabled:
            return "regeneration not asked for (--no-regen)"
        if self.root is None:
            return "no release folder"
        if self.gate_failures:
            return (f"regeneration not run: {len(self.gate_failures)} earlier check(s) failed "
                    f"({', '.join(self.gate_failures[:6])}); code from a release runs only after every other check has passed")
        env = self.regen_env()
        if env.kind == "refused":
            return f"regeneration refused: {env.error}"
        if env.kind == "unavailable":
            return f"regeneration not checked: {env.error}" + (f". To check it: {env.how}" if env.how else "")
        return None

    def regen_result(self) -> tuple[RegenEnv, dict[str, dict[str, Path | Exception]]]:
        """(the environment that regenerated, run id -> role -> output folder or exception); regenerates on
        first use. Only for a caller that has seen regen_blocked be None."""
        env = self.regen_env()
        assert self.regen_blocked is None, self.regen_blocked
        if self._regen_out is None:
            sde = dig(self.meta, "freeze", "source_date_epoch") if isinstance(self.meta, dict) else None
            jobs = {}
            for rid in self.run_ids():
                raw = self.root / payload_path("raw", rid)
                if raw.is_dir() and not raw.is_symlink():
                    jobs[rid] = raw
            try:
                self._regen_out = run_regeneration(jobs, self._work() / "runs", sde=sde if isinstance(sde, int) else None,
                                                   env=env, phases=self.phases, workers=self.workers)
            except Exception as e:  # e.g. the interpreter cannot be started: every role of every run says why
                self._regen_out = {rid: {role: e for role in DERIVED_ROLES} for rid in jobs}
        return env, self._regen_out

    @property
    def regen_started(self) -> bool:
        return self._env is not None

    def regeneration(self) -> dict | None:
        """For the report: whether regeneration was checked ("checked", "unverified", "not checked", "refused",
        "not run", "not asked"), why not, and the command that would check it."""
        if not self.regen_enabled:
            return {"state": "not asked", "why": "--no-regen", "how": None}
        if self.root is None:
            return None
        if self.gate_failures:
            return {"state": "not run", "why": self.regen_blocked, "how": None}
        env = self.regen_env()
        if env.kind == "refused":
            return {"state": "refused", "why": env.error, "how": None}
        if env.kind == "unavailable":
            return {"state": "not checked", "why": env.error, "how": env.how}
        if env.unverified:
            return {"state": "unverified", "why": f"the release's own code, not bound to this repository, ran by request "
                    f"({UNVERIFIED_FLAG}): it could reproduce forged derived files", "how": None}
        return {"state": "checked", "why": None, "how": None}

    def regen(self) -> dict[str, dict[str, Path | Exception]]:
        return self.regen_result()[1]

    def run_ids(self) -> list[str]:
        raw = {p.split("/")[2] for p in self.inv.files if p.startswith(f"{PAYLOAD_DIR}/raw/") and p.count("/") >= 3}
        listed = {r.get("id") for r in (self.meta or {}).get("runs", []) if isinstance(r, dict)} if isinstance(self.meta, dict) else set()
        return sorted((raw | {x for x in listed if isinstance(x, str)}), key=path_key)

    def close(self) -> None:
        if self._regen_tmp is not None:
            self._regen_tmp.cleanup()


def _bytes_phase(phases: Phases, key: str, title: str) -> HashProgress:
    """A hashing progress callback (bytes just read, total bytes) feeding one phase bar."""
    started = threading.Event()
    lock = threading.Lock()

    def cb(n: int, total: int) -> None:
        if not started.is_set():
            with lock:
                if not started.is_set():
                    phases.start(key, title, total)
                    started.set()
        phases.advance(key, n)
    return cb


CheckFn = Callable[[VerifyContext], tuple[str, str, list[Finding]]]


def check(check_id: str, title: str) -> Callable[[CheckFn], CheckFn]:
    """Give a check function its stable id and title; the order checks run in is registry.ORDER."""
    def deco(fn: CheckFn) -> CheckFn:
        fn.check_id, fn.title = check_id, title  # type: ignore[attr-defined]
        return fn
    return deco


def result(findings: list[Finding], ok_msg: str, fail_msg: str) -> tuple[str, str, list[Finding]]:
    return ("fail", fail_msg.format(n=len(findings)), findings) if findings else ("pass", ok_msg, [])


SKIP_NO_META = ("skip", "release.json is unreadable (see metadata.canonical)", [])
