"""The one secret scanner: every token kind is found and redacted, harmless look-alikes are not."""

from __future__ import annotations

import hashlib
import json

import pytest

from evidence import secrets as S

# Built by concatenation so that this file itself does not carry whole tokens.
TOKENS = {
    "ghp": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "github_pat": "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "glpat": "glpat-" + "Ab3dEf6hIj9lMn2pQr5t",
    "xoxb": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "AIza": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "AKIA": "AKIA" + "IOSFODNN7EXAMPLE",
    "hf": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "sk": "sk-" + "proj-AbCdEfGhIjKlMnOpQrStUvWx0123",
    "sk-ant": "sk-" + "ant-api03-AbCdEfGhIjKlMnOpQrStUvWx",
}
PEM_BLOCKS = {
    kind: f"-----BEGIN {kind}-----\nMIIEow{'Ab1' * 20}\n{'Zz9' * 20}==\n-----END {kind}-----\n".replace(
        "BLOCK-----\nMIIEow", "BLOCK-----\n\nlQOYBF")
    for kind in ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY",
                 "ENCRYPTED PRIVATE KEY", "PGP PRIVATE KEY BLOCK")
}
CONTEXTS = [
    "{t}",
    "export SOME_VAR={t}",
    '{{"value": "{t}"}}',
    "INFO loaded credentials {t} from cache",
    "https://example.org/x?y={t}",
]


@pytest.mark.parametrize("kind", sorted(TOKENS))
@pytest.mark.parametrize("context", CONTEXTS)
def test_every_token_kind_is_found_and_redacted(kind, context):
    token = TOKENS[kind]
    text = "line one\n" + context.format(t=token) + "\n"
    found = S.find_secrets(text, "f.txt")
    assert found, (kind, context)
    assert all(s.line == 2 and s.path == "f.txt" for s in found), found
    assert token not in "".join(str(s) for s in found)  # the preview is masked
    red = S.redact(text)
    assert token not in red and S.REDACTED in red
    assert S.find_secrets(red) == [], red


@pytest.mark.parametrize("kind", sorted(PEM_BLOCKS))
def test_private_key_blocks_of_every_kind(kind):
    block = PEM_BLOCKS[kind]
    text = "# key below\n" + block + "after\n"
    found = S.find_secrets(text.encode())
    assert [s.kind for s in found] == ["private key"] and found[0].line == 2
    red = S.redact(text)
    assert red == f"# key below\n{S.REDACTED}\nafter\n"  # the whole block goes, not only its header
    # a block cut off before its END line is still a key, to the end of the text
    assert "Ab1Ab1" not in S.redact(text.split("-----END")[0])


@pytest.mark.parametrize("text", [
    "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789",
    '{"OPENAI_API_KEY": "sk-proj-abcdefghijklmnopqrstuv"}',
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abcdefgh",
    "git remote https://alice:hunter2secret@github.com/x/y",
    "https://oauth2:" + "glpat-abcdefghijklmnopqrst@gitlab.com/a/b",
    "MY_SERVICE_PASSWORD=correct-horse",
    "export GITHUB_TOKEN=ghp_0123456789abcdef",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    '{"api_key": "abc123456"}',
    "db_password: pw-value-1",
    "fetch https://host/x?access_token=qs-secret-1&a=1",
])
def test_release_and_provenance_rules_both_hold(text):
    assert S.find_secrets(text), text
    assert S.find_secrets(S.redact(text)) == [], S.redact(text)


@pytest.mark.parametrize("text", [
    "HF_TOKEN=***", 'HF_TOKEN: "<redacted>"', "HF_TOKEN=REDACTED", "HF_TOKEN=${HF_TOKEN}", "HF_TOKEN=",
    "MAX_NUM_BATCHED_TOKENS=8192", "TOKENIZERS_PARALLELISM=false", "VLLM_CPU_KVCACHE_SPACE=1",
    '"prompt_tokens": 128', '{"max_tokens": 256, "ignore_eos": true}', "max_tokens=4096",
    '"tokenizer": "Qwen/Qwen2.5-7B-Instruct"', "tokenizer_mode=auto", '"eos_token": "<|im_end|>"',
    '"pad_token": "<|endoftext|>"', "eos_token_id=151645", '"num_tokens": 1024', "kv_cache_tokens: 65536",
    "https://huggingface.co/Qwen/Qwen2.5", "task-1234567890abcdefghijklmnop", "disk-0123456789abcdefghijk",
    "sha256:" + hashlib.sha256(b"x").hexdigest(), hashlib.sha256(b"y").hexdigest() + "  data/raw/x.jsonl",
    '{"sha256": "' + hashlib.sha256(b"z").hexdigest() + '"}', "the bearer authentication scheme",
    "sort_key=lambda", '"model": "models/tiny"', "ASIAN market", "skip-connections",
])
def test_harmless_strings_are_not_flagged(text):
    assert S.find_secrets(text) == [], (text, S.find_secrets(text))
    assert S.redact(text) == text


def test_structures_argv_and_names():
    obj = {"api_key": "abc123456", "Authorization": "Bearer zzzzzzzzzzzz", "max_num_batched_tokens": 2048,
           "tokenizer": "models/tiny", "argv": ["serve", "--api-key", "cli-secret-1", "--hf-token=cli-secret-2"],
           "note": "uses " + TOKENS["hf"]}
    r = S.redact(obj)
    assert r["api_key"] == r["Authorization"] == S.REDACTED
    assert r["max_num_batched_tokens"] == 2048 and r["tokenizer"] == "models/tiny"
    assert r["argv"] == ["serve", "--api-key", S.REDACTED, f"--hf-token={S.REDACTED}"]
    assert TOKENS["hf"] not in json.dumps(r) and S.find_secrets_in(r) == []
    assert {h["path"] for h in S.find_secrets_in(obj)} == {"api_key", "Authorization", "argv[3]", "note"}
    assert S.secret_env_name("HF_HUB_TOKEN") and not S.secret_key_name("max_tokens")


def test_scan_files_counts_lines_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "CHUNK", 64)
    lines = [f"row {i} ok" for i in range(40)]
    lines[25] = "HF_TOKEN=" + TOKENS["hf"]
    lines[33] = PEM_BLOCKS["PGP PRIVATE KEY BLOCK"].splitlines()[0]
    (tmp_path / "log.txt").write_text("\n".join(lines))
    (tmp_path / "clean.txt").write_text("nothing here\n" * 50)
    found = S.scan_files(tmp_path, ["clean.txt", "log.txt"], workers=2)
    assert sorted({(s.path, s.line) for s in found}) == [("log.txt", 26), ("log.txt", 34)]


def test_provenance_uses_the_one_scanner():
    from evidence.run.provenance import collect

    assert collect.redact is S.redact and collect.scrub_text is S.scrub_text
    assert collect.secret_key_name is S.secret_key_name and collect.find_secrets is S.find_secrets_in
