"""Every verify check has a tamper that makes it fail: the TAMPERS table of test_release.py, or a row
here naming the test whose tamper it is. The check ids are read from the verify registry, so a new
check without a tamper fails this test until one is added."""

from __future__ import annotations

import ast
from pathlib import Path

from evidence.release.verify import CHECK_IDS

HERE = Path(__file__).resolve().parent

# check id -> "file::test" whose tamper fails this check (checks the TAMPERS table does not reach:
# archives, regeneration, whole-path rules and tags need their own set-up)
CAUGHT_BY = {
    "archive.members": "test_release.py::test_verify_rejects_unsafe_tar_before_extracting",
    "archive.sha256": "test_release.py::test_archive_that_differs_from_its_published_sha256_fails",
    "paths.backslash": "test_release.py::test_path_rules",
    "paths.encoding": "test_release.py::test_path_rules",
    "metadata.schema": "test_hostile.py::test_release_json_strict_schema_even_when_resealed",
    "metadata.originals": "test_compress.py::test_a_resealed_edit_of_a_compressed_file_fails_its_original",
    "git.tag": "test_verify_tags.py::test_absent_cli_prints_the_note_and_require_tag_fails",
    "git.name": "test_verify_integrity.py::test_renamed_tag_in_release_json_fails_and_keeps_the_tag_checks_on",
    "git.head": "test_verify_integrity.py::test_edited_in_place_and_resealed_is_caught_without_the_tag",
    "metadata.steps": "test_regen_hostile.py::test_regenerate_steps_changed_to_a_shell_command_are_refused",
    "regen.code": "test_regen_hostile.py::test_a_dist_info_dotdot_pth_entry_is_refused",
    "regen.analysis": "test_regen.py::test_tampered_derived_file_fails_through_the_own_regenerator",
    "regen.figures": "test_release.py::test_tampered_figures_fail_regeneration",
    "regen.report": "test_regen.py::test_a_forged_wheel_is_refused",
    "regen.release": "test_release_level.py::test_verify_regenerates_the_release_level_files",
}


def tamper_rows() -> dict[str, set[str]]:
    """TAMPERS of test_release.py, read from its source: tamper id -> the check ids it must fail."""
    tree = ast.parse((HERE / "test_release.py").read_text())
    (table,) = [
        n.value
        for n in tree.body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TAMPERS" for t in n.targets)
    ]
    assert isinstance(table, ast.List)
    return {ast.literal_eval(row.elts[0]): ast.literal_eval(row.elts[2]) for row in table.elts}


def _test_source(ref: str) -> str | None:
    file, name = ref.split("::")
    path = HERE / file
    if not path.is_file():
        return None
    src = path.read_text()
    for n in ast.parse(src).body:
        if isinstance(n, ast.FunctionDef) and n.name == name:
            return ast.get_source_segment(src, n)
    return None


def test_every_verify_check_has_a_tamper() -> None:
    covered = set(CAUGHT_BY).union(*tamper_rows().values())
    missing = [c for c in CHECK_IDS if c not in covered]
    assert not missing, (
        f"verify checks without a tamper that makes them fail: {missing}; add a row to TAMPERS "
        f"in tests/release/test_release.py, or a test and its row to CAUGHT_BY in {Path(__file__).name}"
    )


def test_the_table_names_only_real_checks() -> None:
    named = set(CAUGHT_BY).union(*tamper_rows().values())
    assert named <= set(CHECK_IDS), sorted(named - set(CHECK_IDS))


def test_every_row_names_a_test_that_names_its_check() -> None:
    for cid, ref in CAUGHT_BY.items():
        src = _test_source(ref)
        assert src is not None, f"{cid}: {ref} is not a test function"
        assert f'"{cid}"' in src, f"{cid}: {ref} never names it"
