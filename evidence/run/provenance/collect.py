"""Provenance: what the experiment ran on, collected once per engine start (this module assembles it).

`collect_provenance(spec, ...)` returns a JSON-able dict: host, container hints,
accelerator (NVML, else `nvidia-smi -q -x`, else an explicit "none" and how it
looked), the harness's and the engine's python and every installed package,
the engine build and version, sha256 of the model's files, git state, the
spec's sha256, an allow-listed environment, and the pin checks (requested vs
effective for everything the spec pins).

A release is meant to be published, so secrets never get in: the environment is
allow-listed by prefix, and within it any name containing TOKEN, KEY, SECRET,
PASSWORD or CREDENTIAL has its value replaced; every string in the result is
also scrubbed of credential-looking values (user:pass@ in URLs, hf_... tokens,
bearer tokens, common API key shapes). `redact(obj)` does that to any JSON-able
structure; `find_secrets(path_or_tree)` reports what looks like a secret in
files (freeze uses it to refuse).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

# The parts live in host, packages, git and pins; their names stay importable from here.
from evidence.run.provenance.git import git_info  # noqa: F401
from evidence.run.provenance.host import accelerator_info, container_info, host_info, utc_now  # noqa: F401
from evidence.run.provenance.packages import (  # noqa: F401
    MODEL_FILES, WEIGHT_SUFFIXES, engine_python_info, harness_python, model_info,
)
from evidence.run.provenance.pins import check_pins, failed_pins, refusal_message  # noqa: F401
from evidence.spec.model import Spec

# One scanner for the whole package (evidence.secrets); its names stay importable from here.
from evidence.secrets import (  # noqa: E402,F401
    REDACTED, find_secrets_in as find_secrets, redact, scrub_text, secret_env_name, secret_key_name,
    strip_url_credentials,
)

# ------------------------------------------------------------- environment --

ENV_PREFIXES = (
    "VLLM_", "CUDA_", "NCCL_", "TORCH_", "TORCHINDUCTOR_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_",
    "HF_", "TRANSFORMERS_", "TOKENIZERS_", "PYTORCH_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "TRITON_",
    "NVIDIA_", "ONEDNN_", "DNNL_", "EVIDENCE_",
)
ENV_NAMES = ("PYTHONHASHSEED", "LD_PRELOAD", "SOURCE_DATE_EPOCH", "TZ", "CI")


def allowed_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of an environment, secrets redacted (sorted by name)."""
    env = os.environ if environ is None else environ
    out = {}
    for k in sorted(env):
        if not (k.startswith(ENV_PREFIXES) or k in ENV_NAMES):
            continue
        v = env[k]
        out[k] = REDACTED if (secret_env_name(k) and v) else scrub_text(v)
    return out


# -------------------------------------------------------------- collection --


def _engine_python(spec: Spec) -> bool:
    from evidence.engines import adapter_class

    return adapter_class(spec.engine.kind).engine_python


def _engine_section(spec: Spec, engine: Any, engine_python: str | None,
                    root: Path) -> tuple[dict[str, Any], str | None, dict[str, str] | None]:
    sec: dict[str, Any] = {"kind": spec.engine.kind, "requested_version": spec.engine.version}
    py = engine_python
    probe = engine if engine is not None and hasattr(engine, "probe_env") else None
    if engine is not None and py is None:
        py = getattr(engine, "python", None)
    if engine is None:
        from evidence.engines import adapter_class  # what can be probed before a server is the adapter's to say

        probe = adapter_class(spec.engine.kind).provenance_probe(spec, root)
        py = py or getattr(probe, "python", None)
    env = probe.probe_env() if probe is not None else None
    build = None
    if engine is not None and hasattr(engine, "build") and (engine_python is None or engine_python == py):
        build = engine.build()
    elif py:
        from evidence.engines.vllm.adapter import engine_build

        build = engine_build(py, env)
    sec["build"] = build
    reported = None
    if engine is not None and hasattr(engine, "alive") and engine.alive():
        reported = engine.version()
    sec["reported_version"] = reported
    sec["version"] = reported or (build or {}).get("version")
    sec["version_source"] = "/version" if reported else ("installed distribution" if build else None)
    if engine is not None and hasattr(engine, "environment") and not getattr(engine, "env_applied", None):
        try:
            engine.environment()  # fills env_applied: what the engine will be given, and why
        except Exception:
            pass
    if engine is not None and hasattr(engine, "describe"):
        try:
            sec["launch"] = engine.describe()
        except Exception as e:
            sec["launch_error"] = str(e)
    sec["python"] = py
    return sec, py, env


def collect_provenance(
    spec: Spec | None,
    *,
    repo_root: str | os.PathLike,
    engine: Any = None,
    engine_python: str | None = None,
    code_commit: str | None = None,
    code_dirty: bool | None = None,
    spec_sha256: str | None = None,
    hash_weights: bool = True,
) -> dict[str, Any]:
    """Everything provenance.json records (redacted), with the pin checks under "pins".

    `spec` None: only what does not depend on a spec (no model, no pins; the
    engine python is `.venv-vllm/bin/python` under repo_root when there is one).
    `code_commit`/`code_dirty` (or EVIDENCE_CODE_COMMIT / EVIDENCE_CODE_DIRTY=0|1)
    stand in for git when the tree has no .git (e.g. a copied checkout).
    """
    root = Path(repo_root).resolve()
    from evidence import __version__

    if spec is None:
        default_py = root / ".venv-vllm" / "bin" / "python"
        py = engine_python or (str(default_py) if default_py.exists() else None)
        from evidence.engines.vllm.adapter import engine_build

        build = engine_build(py) if py else None
        engine_sec = {"kind": None, "build": build, "version": (build or {}).get("version"),
                      "version_source": "installed distribution" if build else None, "python": py}
        probe_env = None
    else:
        engine_sec, py, probe_env = _engine_section(spec, engine, engine_python, root)
    env_engine = dict(getattr(engine, "env_applied", {}) or {})
    visible = (env_engine.get("CUDA_VISIBLE_DEVICES") or {}).get("value") if env_engine else None
    if visible is None:
        spec_env = spec.engine.env if spec is not None else {}
        visible = spec_env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    prov: dict[str, Any] = {
        "schema": "evidence.provenance/1",
        "collected_at": utc_now(),
        "evidence_version": __version__,
        "spec": {"name": spec.name if spec else None, "sha256": spec_sha256},
        "host": host_info(),
        "container": container_info(),
        "accelerator": accelerator_info(visible),
        "python": {"harness": harness_python()},
        "engine": engine_sec,
        "model": model_info(spec, root, hash_weights=hash_weights) if spec else None,
        "git": git_info(root, code_commit, code_dirty),
        "env": {
            "allow_list": {"prefixes": list(ENV_PREFIXES), "names": list(ENV_NAMES)},
            "harness": allowed_env(),
            "engine_applied": {k: (REDACTED if secret_env_name(k) else scrub_text(v.get("value", "")))
                               for k, v in sorted(env_engine.items())},
        },
    }
    if py and (spec is None or _engine_python(spec)):
        prov["python"]["engine"] = engine_python_info(py, probe_env)
    if engine is not None and hasattr(engine, "resolved") and getattr(engine, "alive", lambda: False)():
        try:
            res = engine.resolved()
            rev = res.get("revision")
            if rev and rev.get("value") and prov.get("model"):
                prov["model"]["revision_reported"] = rev["value"]
        except Exception:
            pass
    prov["pins"] = check_pins(spec, prov) if spec is not None else []
    return redact(prov)


