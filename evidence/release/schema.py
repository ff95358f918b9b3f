"""release.json's strict schema: every field, its type, nothing else.

Verify validates release.json against it (check metadata.schema): an extra field or a wrong type
(source_date_epoch as a string, tag: 42) is a failure even when the release was consistently
resealed, because a reader of the release (or a later version of this tool) would take it
differently. Strict mode: no coercion ("5" is not 5, true is not 1).
A new field of release.json is added here in the same change that writes it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evidence.release.layout import ALLOW_VALUES, FORMAT, ROLES, TAG_NAME, Finding

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Commit = Annotated[str, Field(pattern=r"^[0-9a-f]{7,64}$")]
Count = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class FileEntry(_Strict):
    path: str
    role: Literal[ROLES] | None  # type: ignore[valid-type]
    run: str | None
    bytes: Count
    sha256: Sha256


class FreezeInfo(_Strict):
    allowed: list[Literal[ALLOW_VALUES]]  # type: ignore[valid-type]
    code_commit: Commit
    date: Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")]
    date_from: str
    source_date_epoch: Count


class Regenerate(_Strict):
    functions: dict[str, str]
    how: str
    steps: list[str]


class Tool(_Strict):
    name: Literal["evidence"]
    version: str


class RunCode(_Strict):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)
    commits: list[Commit]
    dirty: bool | None
    from_: list[str] = Field(alias="from")


class RunSpecInfo(_Strict):
    name: str | None
    sha256: Sha256 | None
    resolved_sha256: Sha256 | None


class RunTrials(_Strict):
    planned: Count
    present: list[str]
    missing: list[str]


class RunInfo(_Strict):
    id: str
    status: str | None
    spec: RunSpecInfo
    plan_sha256: Sha256
    code: RunCode
    trials: RunTrials
    aborted: list[str]
    problems_allowed: list[str]


class Supersedes(_Strict):
    tag: Annotated[str, Field(pattern=TAG_NAME.pattern)]
    release_json_sha256: Sha256  # the superseded release's release.json as committed: the exact release meant
    frozen: str | None
    erratum: str | None  # the payload file holding the erratum (data/release/notes.md), when one was given


class Original(_Strict):
    path: str  # the compressed file in the payload (data/raw/<run>/.../NAME.gz)
    bytes: Count  # of the file as recorded, before compression
    sha256: Sha256


class RawCompressed(_Strict):
    method: str
    names: list[str]
    originals: list[Original]


class ReleaseMeta(_Strict):
    format: Literal[FORMAT]  # type: ignore[valid-type]
    tag: Annotated[str, Field(pattern=TAG_NAME.pattern)]
    repo_path: str
    tool: Tool
    freeze: FreezeInfo
    render_environment: dict[str, str | None]
    roles: dict[str, str]
    runs: list[RunInfo]
    regenerate: Regenerate
    files: list[FileEntry]
    supersedes: list[Supersedes] | None = None  # freeze --supersedes: absent in releases that supersede none
    raw_compressed: RawCompressed | None = None  # freeze --compress-raw: absent in releases that store raw as recorded


def schema_problems(meta: object) -> list[Finding]:
    """Every way release.json departs from the schema: (field path, what it must be, what it is)."""
    try:
        ReleaseMeta.model_validate(meta)
    except ValidationError as e:
        out = []
        for err in e.errors(include_url=False):
            where = ".".join(str(x) for x in err["loc"])
            found = err.get("input")
            found = found if isinstance(found, (str, int, float, bool, type(None))) else type(found).__name__
            if err["type"] == "extra_forbidden":
                out.append(Finding(f"release.json:{where}", "no such field", found, "a field release.json does not have"))
            else:
                out.append(Finding(f"release.json:{where}" if where else "release.json",
                                   err["msg"].removeprefix("Input should be "), found, "wrong type or value"))
        return out
    return []
