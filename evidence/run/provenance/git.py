"""Provenance of the code: the commit, whether the tree is clean, the remotes (credentials stripped)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from evidence.secrets import strip_url_credentials


# --------------------------------------------------------------------- git --


def git_info(repo_root: Path, code_commit: str | None = None, code_dirty: bool | None = None) -> dict[str, Any]:
    passed = code_commit or os.environ.get("EVIDENCE_CODE_COMMIT") or None
    passed_from = "code_commit argument" if code_commit else ("EVIDENCE_CODE_COMMIT" if passed else None)
    if code_dirty is None and os.environ.get("EVIDENCE_CODE_DIRTY") in ("0", "1"):
        code_dirty = os.environ["EVIDENCE_CODE_DIRTY"] == "1"
    try:
        import git  # GitPython
    except Exception as e:  # ImportError, or git binary missing
        return {"present": None, "error": f"GitPython unusable: {e}", "commit": passed, "commit_source": passed_from,
                "dirty": code_dirty, "dirty_source": "passed in" if code_dirty is not None else None}
    try:
        repo = git.Repo(repo_root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return {"present": False, "note": f"no .git at or above {repo_root}: the commit is what was passed in",
                "commit": passed, "commit_source": passed_from, "dirty": code_dirty,
                "dirty_source": "passed in" if code_dirty is not None else None}
    info: dict[str, Any] = {"present": True, "root": repo.working_tree_dir}
    try:
        info["commit"] = repo.head.commit.hexsha
        info["commit_source"] = "git HEAD"
    except Exception as e:  # empty repository, dubious ownership...
        info["commit"] = passed
        info["commit_source"] = passed_from
        info["error"] = f"could not read HEAD: {str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__}"
    try:
        info["branch"] = repo.active_branch.name
    except Exception:
        info["branch"] = None  # detached HEAD or no commits
    try:
        dirty_paths = sorted({d.a_path for d in repo.index.diff(None)} | {d.a_path for d in repo.index.diff("HEAD")}) \
            if "commit" in info and info.get("commit_source") == "git HEAD" else []
        untracked = sorted(repo.untracked_files)
        info["dirty"] = bool(dirty_paths or untracked)
        info["dirty_source"] = "git status (tracked changes and untracked files)"
        info["modified"] = dirty_paths[:100]
        info["untracked"] = untracked[:100]
        info["modified_count"] = len(dirty_paths)
        info["untracked_count"] = len(untracked)
    except Exception as e:
        info["dirty"] = None
        info["dirty_error"] = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
    try:
        info["remotes"] = {r.name: [strip_url_credentials(u) for u in r.urls] for r in repo.remotes}
    except Exception:
        info["remotes"] = {}
    if passed and info.get("commit") and passed != info["commit"]:
        info["passed_commit"] = passed
    return info


