"""The tiny model folder: byte-deterministic, idempotent, refuses to overwrite, and what
vLLM needs (config, generation config, tokenizer with a chat template)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT
from evidence.tools.tinymodel import RECIPE_FILE, TinyModelError, file_hashes, make_tiny_model

pytestmark = pytest.mark.engine  # the tokenizer is trained with the engine venv's `tokenizers`


def test_two_builds_are_byte_identical(tmp_path, tiny_model):
    a = make_tiny_model(tmp_path / "a")
    ha = file_hashes(a)
    assert ha == file_hashes(tiny_model)  # a build in another process, earlier (the session fixture)
    assert sorted(ha) == ["chat_template.jinja", "config.json", RECIPE_FILE, "generation_config.json",
                          "tokenizer.json", "tokenizer_config.json"]


def test_config_is_the_small_qwen2(tiny_model):
    cfg = json.loads((tiny_model / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForCausalLM"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["head_dim"]) == (256, 4, 4, 2, 64)
    assert cfg["intermediate_size"] == 512 and cfg["max_position_embeddings"] >= 2048
    assert cfg["torch_dtype"] == "float32"
    tok = json.loads((tiny_model / "tokenizer.json").read_text())
    size = len(tok["model"]["vocab"]) + len([t for t in tok["added_tokens"] if t["content"] not in tok["model"]["vocab"]])
    assert cfg["vocab_size"] == size == 4096
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    assert cfg["eos_token_id"] == ids["<|im_end|>"]
    assert "<|im_start|>" in (tiny_model / "chat_template.jinja").read_text()
    gen = json.loads((tiny_model / "generation_config.json").read_text())
    assert gen["eos_token_id"] == cfg["eos_token_id"]
    recipe = json.loads((tiny_model / RECIPE_FILE).read_text())
    assert len(recipe["corpus"]["files"]) == len({f["path"] for f in recipe["corpus"]["files"]}) > 10


def test_identical_folder_is_left_alone(tmp_path):
    d = make_tiny_model(tmp_path / "m")
    before = {p.name: p.stat().st_mtime_ns for p in d.iterdir()}
    assert make_tiny_model(d) == d
    assert {p.name: p.stat().st_mtime_ns for p in d.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no build folders left behind


def test_different_folder_is_refused_not_overwritten(tmp_path):
    d = make_tiny_model(tmp_path / "m")
    cfg = d / "config.json"
    cfg.write_text(cfg.read_text().replace('"hidden_size": 256', '"hidden_size": 512'))
    changed = cfg.read_bytes()
    with pytest.raises(TinyModelError, match=r"different model folder .*config.json.*refusing to overwrite"):
        make_tiny_model(d)
    assert cfg.read_bytes() == changed
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "weights.bin").write_bytes(b"x")
    with pytest.raises(TinyModelError, match="refusing"):
        make_tiny_model(tmp_path / "other")


def test_cli_model_tiny(tmp_path, tiny_model):
    # through evidence.cli:main, as the `evidence` console script runs it
    argv = [sys.executable, "-c", "import sys; from evidence.cli import main; sys.argv[0] = 'evidence'; main()",
            "model", "tiny", str(tmp_path / "t")]
    run = lambda: subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)  # noqa: E731
    p = run()
    assert p.returncode == 0, p.stderr
    assert "built" in p.stdout and "tokenizer.json" in p.stdout
    assert file_hashes(tmp_path / "t") == file_hashes(tiny_model)
    p2 = run()
    assert p2.returncode == 0 and "unchanged" in p2.stdout
    (tmp_path / "t" / "config.json").write_text("{}")
    p3 = run()
    assert p3.returncode == 2 and "refusing to overwrite" in p3.stderr and "Traceback" not in p3.stderr
