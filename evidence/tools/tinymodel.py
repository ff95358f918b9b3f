"""A tiny weightless model folder for tests, CI and the CPU demo.

`make_tiny_model(dir)` writes a folder vLLM can serve with `--load-format dummy`
(random weights, so the compute is the real Qwen2 architecture's but the text is
meaningless): config.json, generation_config.json, a byte-level BPE tokenizer
trained on a fixed, sorted list of the Python standard library's sources, and
`evidence-tiny.json`, the recipe (corpus files and their sha256, library
versions) so the folder says how it was made.

Built byte-deterministically: two builds with the same python, `tokenizers` and
`transformers` give identical bytes in every file, so provenance hashes are
stable. An existing identical folder is left alone; an existing different one is
refused, never overwritten.

`tokenizers` and `transformers` live in the engine's venv, not necessarily in
the harness's. This module is therefore also a script: when the harness lacks
them, the build runs as `<engine python> tinymodel.py --build OUT` (the script
part imports only the standard library and those two packages).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RECIPE_VERSION = 1
VOCAB_SIZE = 4096  # trained byte-level BPE, the special tokens included
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
RECIPE_FILE = "evidence-tiny.json"

#: The training corpus: these standard-library files, in this order. Chosen to
#: exist (as plain modules) in every CPython 3.9-3.13.
CORPUS = (
    "argparse.py", "ast.py", "calendar.py", "collections/__init__.py", "configparser.py",
    "csv.py", "dataclasses.py", "datetime.py", "difflib.py", "email/message.py",
    "enum.py", "fractions.py", "functools.py", "gettext.py", "glob.py", "gzip.py",
    "heapq.py", "inspect.py", "ipaddress.py", "json/decoder.py", "json/encoder.py",
    "logging/__init__.py", "os.py", "pathlib.py", "pickle.py", "pprint.py", "random.py",
    "shlex.py", "shutil.py", "statistics.py", "string.py", "subprocess.py", "tarfile.py",
    "tempfile.py", "textwrap.py", "threading.py", "tokenize.py", "typing.py",
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class TinyModelError(Exception):
    """The folder could not be built, or a different folder is in the way."""


def model_config(vocab_size: int, eos_id: int, bos_id: int) -> dict:
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 256,
        "initializer_range": 0.02,
        "intermediate_size": 512,
        "max_position_embeddings": 4096,
        "max_window_layers": 4,
        "model_type": "qwen2",
        "num_attention_heads": 4,
        "num_hidden_layers": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab_size,
    }


def _dump(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _sha256(path: Path) -> str:
    # stdlib only: this file also runs as a script under the engine's python, without evidence
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _build(out: Path) -> None:
    """Write the folder into `out` (empty). Needs `tokenizers` and `transformers`."""
    import sysconfig

    import tokenizers
    import transformers
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    missing = [f for f in CORPUS if not (stdlib / f).is_file()]
    if missing:
        raise TinyModelError(f"the corpus files {missing} are not in this python's standard library ({stdlib})")
    texts = [(stdlib / f).read_text(encoding="utf-8", errors="replace") for f in CORPUS]

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIALS),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    vocab = tok.get_vocab_size(with_added_tokens=True)
    eos, bos = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token=None, model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))

    _dump(out / "config.json", model_config(vocab, eos, bos))
    _dump(out / "generation_config.json", {
        "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": bos, "do_sample": False,
    })
    _dump(out / RECIPE_FILE, {
        "recipe": "evidence tiny model",
        "recipe_version": RECIPE_VERSION,
        "weights": "none: serve with --load-format dummy (random weights)",
        "vocab_size": vocab,
        "corpus": {"root": "python stdlib", "python": sys.version.split()[0],
                   "files": [{"path": f, "sha256": hashlib.sha256((stdlib / f).read_bytes()).hexdigest()} for f in CORPUS]},
        "libraries": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__},
    })
    # Make the bytes independent of anything the libraries might stamp in.
    for p in sorted(out.iterdir()):
        if p.suffix == ".json" and p.name != "tokenizer.json":
            try:
                obj = json.loads(p.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if p.name == "tokenizer_config.json":
                # the class name every transformers version (4.x too) knows
                obj["tokenizer_class"] = "PreTrainedTokenizerFast"
            _dump(p, obj)


def _has_builder_libs() -> bool:
    try:
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except Exception:
        return False
    return True


def _engine_python_default() -> Path | None:
    from evidence.resources import REPO_CANDIDATE  # lazily: this file also runs as a script under the engine's python

    for base in (Path.cwd(), REPO_CANDIDATE):
        p = base / ".venv-vllm" / "bin" / "python"
        if p.exists():
            return p
    return None


def file_hashes(folder: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under folder."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): _sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def make_tiny_model(dir: str | os.PathLike, *, python: str | os.PathLike | None = None) -> Path:
    """Build the tiny model folder at `dir` (idempotent); returns its path.

    `python`: the interpreter that has `tokenizers` and `transformers` (default: this
    one if it has them, else `.venv-vllm/bin/python`). Raises TinyModelError when a
    different folder is already there or the build fails.
    """
    dest = Path(dir)
    if dest.exists() and not dest.is_dir():
        raise TinyModelError(f"{dest} exists and is not a folder; give a new or empty folder for the tiny model")
    parent = dest.parent if str(dest.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.build-", dir=parent))
    try:
        if python is None and _has_builder_libs():
            _build(tmp)
        else:
            py = Path(python) if python is not None else _engine_python_default()
            if py is None or not Path(py).exists():
                raise TinyModelError(
                    "building the tiny model needs the 'tokenizers' and 'transformers' packages, which this "
                    "python lacks, and no engine venv was found at .venv-vllm (run 'evidence engine install-cpu' "
                    "first, or pass the python that has them)")
            from evidence.resources import TINYMODEL_SCRIPT

            proc = subprocess.run([str(py), str(TINYMODEL_SCRIPT), "--build", str(tmp)],
                                  capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0",
                                                                       "TOKENIZERS_PARALLELISM": "false",
                                                                       "HF_HUB_OFFLINE": "1",
                                                                       "TRANSFORMERS_OFFLINE": "1"})
            if proc.returncode != 0:
                tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
                raise TinyModelError(f"building the tiny model with {py} failed (exit {proc.returncode}): {tail}")
        built = file_hashes(tmp)
        if dest.is_dir() and any(dest.iterdir()):
            have = file_hashes(dest)
            if have == built:
                return dest
            diff = sorted(set(have) ^ set(built)) + sorted(k for k in set(have) & set(built) if have[k] != built[k])
            raise TinyModelError(
                f"{dest} already holds a different model folder (differs in: {', '.join(diff[:6])}"
                f"{' ...' if len(diff) > 6 else ''}); refusing to overwrite it. Remove it or choose another folder")
        if dest.is_dir():
            dest.rmdir()
        os.chmod(tmp, 0o755)
        try:
            os.replace(tmp, dest)
        except OSError:
            # another process finished the same folder first: fine if it is identical
            if dest.is_dir() and file_hashes(dest) == built:
                return dest
            raise
        return dest
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":  # run by the engine's python: tinymodel.py --build OUT
    if len(sys.argv) != 3 or sys.argv[1] != "--build":
        sys.exit("usage: tinymodel.py --build OUT_DIR")
    try:
        _build(Path(sys.argv[2]))
    except TinyModelError as e:
        sys.exit(str(e))
