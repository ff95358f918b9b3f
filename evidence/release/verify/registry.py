"""The checks `verify` runs, in the order it runs them: cheap structural checks first (as bagit-python's
`Bag.validate` does), then fixity, metadata, git, and regeneration last: it runs the release's own code, so it runs only
when every check before it has passed (verify/__init__.py sets the gate). Ids and order are stable:
scripts and published verify outputs name them."""

from __future__ import annotations

from evidence.release.verify import checks_archive as archive
from evidence.release.verify import checks_bagit as bagit
from evidence.release.verify import checks_git as git
from evidence.release.verify import checks_metadata as metadata
from evidence.release.verify import checks_paths as paths
from evidence.release.verify import checks_regen as regen
from evidence.release.verify.context import CheckFn

ORDER: tuple[CheckFn, ...] = (
    archive.archive_members,
    archive.archive_sha,
    paths.absolute,
    paths.dotdot,
    paths.backslash,
    paths.encoding,
    paths.collision,
    paths.symlinks,
    paths.hardlinks,
    paths.special,
    bagit.declaration,
    bagit.manifests,
    bagit.oxum,
    bagit.info,
    bagit.missing,
    bagit.unexpected,
    bagit.fixity_payload,
    bagit.fixity_tag,
    metadata.canonical,
    metadata.schema,
    metadata.agrees,
    metadata.originals,
    regen.metadata_steps,
    metadata.provenance,
    git.git_name,
    git.git_tag,
    git.git_annotated,
    git.git_peel,
    git.git_message,
    git.git_files,
    git.git_head,
    regen.regen_code,
    regen.regen_analysis,
    regen.regen_figures,
    regen.regen_report,
    regen.regen_release,
)

CHECKS: dict[str, tuple[str, CheckFn]] = {fn.check_id: (fn.title, fn) for fn in ORDER}  # type: ignore[attr-defined]
CHECK_IDS = tuple(CHECKS)
