"""The programs verify runs in a subprocess, under the regenerating environment's interpreter and code.

Each is a script run as `python -P <file> ...`: -P keeps this folder (the auditor's code) off sys.path,
so the only `evidence` they can import is the one on the regenerating environment's path. They import
nothing but the standard library themselves. They print JSON lines: {"step": ...} as they go, then
{"done": {role: error or null}}."""

from pathlib import Path

DRIVERS = Path(__file__).resolve().parent
ENTRY_DRIVER = DRIVERS / "entry.py"  # argv: raw_dir work sde entry
LEGACY_DRIVER = DRIVERS / "legacy.py"  # argv: ws work sde run_id
RELEASE_DRIVER = DRIVERS / "release_level.py"  # argv: data_dir work sde tag entry
