"""Engine adapters: command line, environment, log and /metrics parsing (on real captured
text, CPU 0.32 and H200 0.26), and the real vLLM-CPU server: ready, /version, resolved
settings with their sources, a bad argument failing fast with the log tail, stop leaving
nothing running, the endpoint adapter, the launcher and the installer's marker."""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ENGINE_PYTHON, ROOT, SHARED, require_engine, server_spec, skip_unless_ci
from evidence.resources import VLLM_LAUNCHER
from evidence.engines import EndpointEngine, EngineError, VllmEngine, make_engine
from evidence.engines.base import EXTERNAL, NOT_REPORTED, REQUESTED, combine_resolved, free_port
from evidence.engines.vllm.adapter import group_members
from evidence.engines.vllm.logs import log_tail, parse_dict_repr, parse_server_log
from evidence.engines.vllm.metrics import parse_cache_config_info, parse_metrics
from evidence.spec.model import Spec

# Lines of a real vLLM-CPU 0.32.0 server log (VLLM_LOGGING_LEVEL=DEBUG), captured on this machine.
CPU_LOG = """\
(APIServer pid=9898) INFO 12-03 07:58:06 [entrypoints/.../utils/api_utils.py:286] non-default args: {'model_tag': '/work/main/models/tiny', 'host': '127.0.0.1', 'port': 8931, 'model': '/work/main/models/tiny', 'dtype': 'float32', 'max_model_len': 1024, 'enforce_eager': True, 'served_model_name': ['tiny'], 'load_format': 'dummy'}
(APIServer pid=9898) INFO 12-03 07:58:16 [config/model.py:2152] Using max model len 1024
(APIServer pid=9898) DEBUG 12-03 07:58:16 [engine/arg_utils.py:2996] Enabling chunked prefill by default
(APIServer pid=9898) DEBUG 12-03 07:58:16 [engine/arg_utils.py:3024] Enabling prefix caching by default
(APIServer pid=9898) DEBUG 12-03 07:58:16 [engine/arg_utils.py:3172] Defaulting max_num_batched_tokens to 2048 for OPENAI_API_SERVER usage context.
(APIServer pid=9898) DEBUG 12-03 07:58:16 [engine/arg_utils.py:3182] Defaulting max_num_seqs to 128 for OPENAI_API_SERVER usage context.
(EngineCore pid=9935) INFO 12-03 07:58:22 [v1/engine/core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/work/main/models/tiny', speculative_config=None, tokenizer='/work/main/models/tiny', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.float32, max_seq_len=1024, download_dir=None, load_format=dummy, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, decode_context_parallel_size=1, dcp_comm_backend=ag_rs, disable_custom_all_reduce=True, quantization=None, quantization_config=None, enforce_eager=True, aux_output_config=AuxOutputConfig(enable_return_routed_experts=False, max_bytes=None), kv_cache_dtype=auto, device_config=cpu, structured_outputs_config=StructuredOutputsConfig(backend='auto', disable_any_whitespace=False, disable_additional_properties=False, reasoning_parser='', reasoning_parser_plugin='', enable_in_reasoning=False), observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, otlp_traces_endpoint=None, collect_detailed_traces=None, per_request_spec_decode_metrics='none', kv_cache_metrics=False, kv_cache_metrics_sample=0.01, custom_histogram_buckets=None, cudagraph_metrics=False, enable_layerwise_nvtx_tracing=False, enable_mfu_metrics=False, enable_mm_processor_stats=False, enable_logging_iteration_details=False, jit_monitor_mode='warn', jit_monitor_verbose=False), seed=0, served_model_name=tiny, enable_prefix_caching=True, enable_chunked_prefill=True, pooler_config=None, compilation_config={'mode': <CompilationMode.NONE: 0>, 'debug_dump_path': None, 'cache_dir': '', 'compile_cache_save_format': 'binary', 'backend': 'inductor', 'custom_ops': ['all'], 'ir_enable_torch_wrap': False, 'splitting_ops': [], 'compile_mm_encoder': False, 'cudagraph_mm_encoder': False, 'encoder_cudagraph_token_budgets': [], 'encoder_cudagraph_max_vision_items_per_batch': 0, 'encoder_cudagraph_max_frames_per_batch': None, 'cudagraph_decoder_replay': True, 'decoder_replay_cudagraph_capture_sizes': [], 'decoder_replay_trim_threshold': 768, 'compile_sizes': None, 'compile_ranges_endpoints': [2048], 'inductor_compile_config': {'enable_auto_functionalized_v2': False}, 'inductor_passes': {}, 'cudagraph_mode': <CUDAGraphMode.NONE: 0>, 'cudagraph_num_of_warmups': 0, 'cudagraph_capture_sizes': [], 'cudagraph_copy_inputs': False, 'cudagraph_specialize_lora': True, 'use_inductor_graph_partition': False, 'pass_config': {'fuse_norm_quant': True, 'fuse_act_quant': True, 'fuse_attn_quant': False, 'fuse_allreduce_rms': False, 'enable_qk_norm_rope_fusion': False, 'fuse_rope_kvcache_cat_mla': False, 'fuse_act_padding': False, 'fuse_qk_norm_rope_kvcache': False}, 'max_cudagraph_capture_size': None, 'dynamic_shapes_config': {'type': <DynamicShapesType.BACKED: 'backed'>, 'evaluate_guards': False, 'assume_32_bit_indexing': False}, 'local_cache_dir': None, 'fast_moe_cold_start': False, 'static_all_moe_layers': []}, kernel_config=KernelConfig(ir_op_priority=IrOpPriorityConfig(rms_norm=['native'], fused_add_rms_norm=['native'], gelu_and_mul_sparse=['native']), enable_flashinfer_autotune=True, enable_rocm_segmented_attn_autotune=False, enable_cutedsl_warmup=True, enable_jit_warmup=False, moe_backend='auto', sparse_indexer_topk_backend='auto', linear_backend='auto', linear_backend_per_quant=None)
(EngineCore pid=9935) INFO 12-03 07:58:33 [v1/attention/backends/utils.py:347] Using LBHNC KV cache layout.
(Worker pid=10046) INFO 12-03 07:58:33 [v1/worker/cpu_worker.py:260] Explicitly set (1.0/6.59) GiB for KV cache on node 0.
(EngineCore pid=9935) INFO 12-03 07:58:33 [v1/core/kv_cache_utils.py:2327] CPU KV cache size: 262,144 tokens, Maximum concurrency for 1,024 tokens per request: 256.00x
(APIServer pid=9898) DEBUG 12-03 07:58:37 [v1/metrics/loggers.py:350] Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 2048
(APIServer pid=9898) INFO 12-03 07:58:37 [entrypoints/.../api_server/entry.py:140] Starting vLLM server on http://127.0.0.1:8931
"""

# The cache_config_info line of the same server's /metrics.
CPU_METRICS = (
    '# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n'
    '# TYPE vllm:cache_config_info gauge\n'
    'vllm:cache_config_info{_block_size_resolved="True",block_size="128",cache_dtype="auto",'
    'effective_attention_block_size="128",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.92",'
    'hash_block_size="None",kv_cache_max_concurrency="256.0",kv_cache_memory_bytes="1073741824",'
    'kv_cache_size_tokens="262144",num_cpu_blocks="None",num_gpu_blocks="2048",num_gpu_blocks_override="None",'
    'prefix_caching_hash_algo="sha256",sliding_window="None",user_specified_block_size="False"} 1.0\n'
    'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0\n'
)

H200_SETTINGS = SHARED / "data" / "h200-vllm0.26-torch-profiler" / "server-settings.txt"


def spec_with(**engine_args) -> Spec:
    """A vllm spec with the given engine.args (model path relative to the repo root)."""
    return Spec.model_validate({
        "name": "cmd", "title": "cmd",
        "hardware": {"count": 0},
        "engine": {"kind": "vllm", "args": engine_args, "launch": {"python": ".venv-vllm/bin/python"}},
        "model": {"id": "org/model", "path": "models/tiny", "load_format": "dummy", "served_name": "m"},
        "workload": {"input_len": 8, "output_len": 8, "seed": 1},
        "sweep": {"points": [1], "prompts": {1: 1}},
    })


# ------------------------------------------------------------------ parsing --


def test_parse_cpu_log_reports_resolved_values_with_their_lines():
    r = parse_server_log(CPU_LOG)
    assert r["max_num_batched_tokens"] == {
        "value": 2048, "source": "log: Defaulting max_num_batched_tokens to 2048 for OPENAI_API_SERVER usage context."}
    assert r["max_num_seqs"]["value"] == 128 and "Defaulting max_num_seqs to 128" in r["max_num_seqs"]["source"]
    assert r["engine_version"]["value"] == "0.32.0"
    assert r["dtype"]["value"] == "float32" and "dtype=torch.float32" in r["dtype"]["source"]
    assert r["enable_chunked_prefill"]["value"] is True
    assert r["enable_prefix_caching"]["value"] is True
    assert r["max_model_len"]["value"] == 1024
    assert r["cudagraph_mode"]["value"] == "NONE" and r["compilation_mode"]["value"] == "NONE"
    assert r["device"]["value"] == "cpu"
    assert r["kv_cache_tokens"]["value"] == 262144
    assert r["kv_cache_gib"]["value"] == 1.0
    assert r["num_kv_blocks"]["value"] == 2048
    assert r["kv_cache_layout"]["value"] == "LBHNC"
    for v in r.values():
        assert v["source"].startswith("log: ")
        assert "kind" not in v  # everything here was confirmed by a resolution line


def test_parse_h200_settings_marks_requested_values_as_asked():
    if not H200_SETTINGS.exists():
        skip_unless_ci(f"{H200_SETTINGS} is not here (it lives in ../shared)")
    r = parse_server_log(H200_SETTINGS.read_text())
    # The line was cut inside the ProfilerConfig repr: everything before it is read, nothing invented.
    assert {k: v["value"] for k, v in r.items()} == {
        "dtype": "bfloat16", "max_model_len": 8192, "load_format": "dummy", "gpu_memory_utilization": 0.5,
        "enable_prefix_caching": False, "max_num_batched_tokens": 2048, "max_num_seqs": 256,
    }
    assert all(v["kind"] == "asked" for v in r.values())
    assert "'max_num_batched_tokens': 2048" in r["max_num_batched_tokens"]["source"]
    merged = combine_resolved(r, {}, {})
    assert merged["max_num_batched_tokens"]["value"] == 2048
    assert merged["max_num_batched_tokens"]["source"].endswith("(as asked; no line confirms it)")
    assert merged["attention_backend"] == {"value": None, "source": NOT_REPORTED}


def test_parse_gpu_style_lines():
    text = "\n".join([
        "(EngineCore pid=1) INFO 12-02 18:36:10 [cuda.py:446] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLEX_ATTENTION'].",
        "(EngineCore pid=1) INFO 12-02 18:36:40 [gpu_worker.py:760] Available KV cache memory: 63.2 GiB",
        "(EngineCore pid=1) INFO 12-02 18:36:40 [kv_cache_utils.py:1] GPU KV cache size: 1,840,704 tokens",
        "(EngineCore pid=1) INFO 12-02 18:36:40 [fused_moe.py:1] Using TRITON MoE backend",
        "(APIServer pid=1) INFO 12-02 18:35:51 [scheduler.py:1] Chunked prefill is enabled with max_num_batched_tokens=8192.",
        "(APIServer pid=1) INFO 12-02 18:35:51 [vllm.py:1] Asynchronous scheduling is enabled.",
        "(EngineCore pid=1) INFO 12-02 18:35:55 [core.py:1] Initializing a V1 LLM engine (v0.26.0) with config: "
        "model='/tmp/model', dtype=torch.bfloat16, max_seq_len=8192, enable_prefix_caching=False, "
        "enable_chunked_prefill=True, compilation_config={'level': 3, 'mode': <CompilationMode.VLLM_COMPILE: 3>, "
        "'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'pass_config': {}}",
    ])
    r = parse_server_log(text)
    assert r["attention_backend"]["value"] == "FLASH_ATTN"
    assert r["kv_cache_gib"]["value"] == 63.2
    assert r["kv_cache_tokens"]["value"] == 1840704
    assert r["max_num_batched_tokens"]["value"] == 8192
    assert r["async_scheduling"]["value"] is True
    assert r["engine_version"]["value"] == "0.26.0"
    assert r["dtype"]["value"] == "bfloat16"
    assert r["cudagraph_mode"]["value"] == "FULL_AND_PIECEWISE"
    assert r["compilation_mode"]["value"] == "VLLM_COMPILE"


def test_parse_dict_repr_tolerates_objects_and_truncation():
    d = parse_dict_repr("{'a': 1, 'b': 'x, y', 'c': Obj(p='q', r=[1, 2]), 'd': [1, 2], 'e': {'f': 2}, 'g': Cut(z='")
    assert d == {"a": 1, "b": "x, y", "c": "Obj(p='q', r=[1, 2])", "d": [1, 2], "e": {"f": 2}}


def test_parse_metrics_cache_config_info():
    labels = parse_cache_config_info(CPU_METRICS)
    assert labels["block_size"] == "128"
    m = parse_metrics(CPU_METRICS)
    assert m["block_size"]["value"] == 128
    assert m["block_size"]["source"] == '/metrics cache_config_info block_size="128"'
    assert m["kv_cache_tokens"]["value"] == 262144 and m["kv_cache_gib"]["value"] == 1.0
    assert m["enable_prefix_caching"]["value"] is True
    assert parse_metrics("vllm:num_requests_running 0\n") == {}


def test_combine_priorities_and_requested():
    log = parse_server_log(CPU_LOG)
    out = combine_resolved(log, parse_metrics(CPU_METRICS), {"max_num_seqs": 64, "long_prefill_token_threshold": 0},
                           version="0.32.0")
    assert out["block_size"]["source"].startswith("/metrics")          # metrics win for cache settings
    assert out["max_num_seqs"] == {"value": 128, "source": log["max_num_seqs"]["source"], "requested": 64}
    assert out["long_prefill_token_threshold"] == {"value": 0, "source": REQUESTED, "requested": 0}
    assert out["async_scheduling"] == {"value": None, "source": NOT_REPORTED}
    assert list(out)[:3] == ["engine_version", "max_num_batched_tokens", "max_num_seqs"]


# ------------------------------------------------------------- command line --


def test_command_has_only_what_the_spec_sets():
    eng = VllmEngine(spec_with(), ROOT, port=8123)
    argv = eng.command()
    assert argv[:2] == [str(ROOT / ".venv-vllm/bin/python"), str(VLLM_LAUNCHER)]
    assert argv[2:] == ["serve", str(ROOT / "models/tiny"), "--served-model-name", "m", "--host", "127.0.0.1",
                        "--port", "8123", "--dtype", "auto", "--load-format", "dummy"]


def test_command_maps_every_argument_to_vllm_flags():
    s = spec_with(dtype="bfloat16", max_model_len=8192, gpu_memory_utilization=0.5, enable_prefix_caching=False,
                  enable_chunked_prefill=True, max_num_batched_tokens=2048, max_num_seqs=256,
                  long_prefill_token_threshold=0, tensor_parallel_size=2, pipeline_parallel_size=1,
                  data_parallel_size=2, enforce_eager=True, block_size=16, seed=0, extra=["--async-scheduling"])
    eng = VllmEngine(s, ROOT, port=0, extra_args=["--profiler-config", '{"profiler": "torch"}'])
    argv = eng.command()
    tail = argv[argv.index("--dtype"):]
    assert tail == ["--dtype", "bfloat16", "--max-model-len", "8192", "--gpu-memory-utilization", "0.5",
                    "--no-enable-prefix-caching", "--enable-chunked-prefill", "--max-num-batched-tokens", "2048",
                    "--max-num-seqs", "256", "--long-prefill-token-threshold", "0", "-tp", "2", "-dp", "2",
                    "--enforce-eager", "--block-size", "16", "--seed", "0", "--load-format", "dummy",
                    "--async-scheduling", "--profiler-config", '{"profiler": "torch"}']
    assert eng.port > 0 and eng.base_url == f"http://127.0.0.1:{eng.port}"


def test_flag_spellings_exist_in_vllm_0_32():
    """Every flag command() can emit is one vLLM 0.32's own argument parser defines."""
    src = ROOT / ".venv-vllm" / "lib" / "python3.11" / "site-packages" / "vllm" / "engine" / "arg_utils.py"
    if not src.exists():
        require_engine()  # skips without the engine venv, fails under CI
    text = src.read_text()
    for flag in ("max-model-len", "gpu-memory-utilization", "enable-prefix-caching", "enable-chunked-prefill",
                 "max-num-batched-tokens", "max-num-seqs", "long-prefill-token-threshold", "tensor-parallel-size",
                 "pipeline-parallel-size", "data-parallel-size", "enforce-eager", "block-size", "seed",
                 "load-format", "dtype", "revision", "served-model-name", "tokenizer"):
        assert f'"{flag.replace("-", "_")}"' in text or f'"--{flag}"' in text, flag
    for short in ('"-tp"', '"-pp"', '"-dp"'):
        assert short in text, short


def test_launch_command_replaces_the_prefix_and_revision_only_for_hub_ids():
    s = Spec.model_validate({
        "name": "c", "title": "c",
        "engine": {"kind": "vllm", "launch": {"command": ["python3", "-m", "vllm.entrypoints.cli.main"]}},
        "model": {"id": "Qwen/Qwen2.5-3B-Instruct", "revision": "a" * 40},
        "workload": {"input_len": 8, "output_len": 8, "seed": 1},
        "sweep": {"points": [1], "prompts": {1: 1}},
    })
    argv = VllmEngine(s, ROOT, port=9000).command()
    assert argv[:5] == ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "Qwen/Qwen2.5-3B-Instruct"]
    assert argv[argv.index("--revision") + 1] == "a" * 40
    assert "--revision" not in VllmEngine(spec_with(), ROOT, port=9000).command()


@pytest.fixture
def short_dir():
    """A folder with a short path (pytest's tmp_path can be too long for a unix socket path)."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="ev-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_environment_cpu_defaults_are_explicit_and_recorded(short_dir, monkeypatch):
    tmp_path = short_dir
    monkeypatch.setenv("PYTHONPATH", "/harness/site")
    s = Spec.model_validate({**spec_with().model_dump(), "engine": {
        "kind": "vllm", "env": {"VLLM_CPU_KVCACHE_SPACE": "2", "FOO": "bar"}, "launch": {"python": ".venv-vllm/bin/python"}}})
    eng = VllmEngine(s, ROOT, port=1, cache_dir=tmp_path / "c", extra_env={"VLLM_TORCH_PROFILER_DIR": "/p"})
    eng._build = {"distribution": "vllm-cpu", "version": "0.32.0"}
    env = eng.environment()
    assert "PYTHONPATH" not in env  # the harness's packages never leak into the engine
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and eng.env_applied["VLLM_CPU_KVCACHE_SPACE"]["why"] == "spec engine.env"
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG" and env["HF_HUB_OFFLINE"] == "1"
    assert Path(env["TMPDIR"]).parent == tmp_path / "c" / "tmp" and Path(env["TMPDIR"]).is_dir()
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "c" / "vllm")
    assert env["VLLM_TORCH_PROFILER_DIR"] == "/p" and env["FOO"] == "bar"
    assert "vllm-cpu 0.32.0" in eng.env_applied["VLLM_TARGET_DEVICE"]["why"]
    assert eng.describe()["cpu_defaults"]["applied"] is True
    assert eng.environment()["TMPDIR"] == env["TMPDIR"]  # one private TMPDIR per start
    eng.stop()
    assert not Path(env["TMPDIR"]).exists()  # removed with the engine


def test_api_key_goes_to_the_server_by_environment_and_is_never_recorded(tmp_path, monkeypatch):
    key = "sk-adapter-test-9f8e7d"
    s = Spec.model_validate({**spec_with().model_dump(), "engine": {
        "kind": "vllm", "api_key_env": "MY_SERVER_KEY", "launch": {"python": ".venv-vllm/bin/python"}}})
    monkeypatch.setenv("MY_SERVER_KEY", key)
    monkeypatch.setenv("VLLM_API_KEY", "some-other-inherited-key")
    eng = VllmEngine(s, ROOT, port=1, cache_dir=tmp_path / "c")
    eng._build = {"distribution": "vllm-cpu", "version": "0.32.0"}
    env = eng.environment()
    assert env["VLLM_API_KEY"] == key  # the server checks the key the client sends
    assert key not in json.dumps(eng.describe()) and key not in " ".join(eng.command())
    assert eng.api_key == key
    monkeypatch.delenv("MY_SERVER_KEY")
    env = eng.environment()
    # no key for the client: an inherited VLLM_API_KEY would make every request answer 401
    assert "VLLM_API_KEY" not in env and eng.env_applied["VLLM_API_KEY"]["value"] == "(removed)"
    assert eng.api_key is None
    eng.stop()


def test_environment_without_cpu_build_and_with_gpu_expected(tmp_path):
    s = Spec.model_validate({**spec_with().model_dump(), "hardware": {"accelerator": "NVIDIA H200", "count": 1}})
    eng = VllmEngine(s, ROOT, port=1, cache_dir=tmp_path / ("x" * 80))
    eng._build = {"distribution": "vllm", "version": "0.26.0"}
    env = eng.environment()
    assert "VLLM_TARGET_DEVICE" not in eng.env_applied
    assert eng.cpu_decision()[0] is False
    # a cache folder too long for unix socket paths gets a short private TMPDIR, cleaned on stop
    assert len(env["TMPDIR"]) < 60 and Path(env["TMPDIR"]).is_dir()
    eng.stop()
    assert not Path(env["TMPDIR"]).exists()


def test_start_refuses_a_missing_model_folder(tmp_path):
    s = Spec.model_validate({**spec_with().model_dump(), "model": {"id": "x", "path": str(tmp_path / "nope")}})
    with pytest.raises(EngineError, match="does not exist"):
        VllmEngine(s, ROOT, port=1).start(tmp_path / "log")


def test_make_engine_picks_the_adapter():
    assert isinstance(make_engine(spec_with(), ROOT, port=1), VllmEngine)
    ep = Spec.model_validate({**spec_with().model_dump(), "engine": {"kind": "endpoint", "base_url": "http://127.0.0.1:1/"}})
    e = make_engine(ep, ROOT)
    assert isinstance(e, EndpointEngine) and e.base_url == "http://127.0.0.1:1"


def test_endpoint_not_ready_fails_with_one_paragraph():
    port = free_port()
    ep = Spec.model_validate({**spec_with().model_dump(), "engine": {"kind": "endpoint", "base_url": f"http://127.0.0.1:{port}"}})
    e = EndpointEngine(ep)
    t = time.monotonic()
    with pytest.raises(EngineError, match=r"not ready after 1 s .*nothing answered"):
        e.wait_ready(1, poll_s=0.2)
    assert time.monotonic() - t < 10
    e.stop()  # nothing to stop; no error
    assert e.alive() is False


# ---------------------------------------------------------------- launcher --


def test_launcher_changes_nothing_on_a_normal_vllm_install(monkeypatch):
    import evidence.engines.vllm.launch as vl

    calls = []

    def fake_version(name):
        calls.append(name)
        if name == "vllm":
            return "0.26.0"
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(vl._md, "version", fake_version)
    assert vl.install_alias() is None
    assert vl._md.version is fake_version


def test_launcher_answers_for_vllm_cpu(monkeypatch):
    import evidence.engines.vllm.launch as vl

    def fake_version(name):
        if name == "vllm-cpu":
            return "0.32.0"
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(vl._md, "version", fake_version)
    assert vl.install_alias() == "vllm-cpu 0.32.0"
    # "+cpu" keeps vLLM's own platform detection (vllm_version_matches_substr("cpu")) working
    assert vl._md.version("vllm") == "0.32.0+cpu"
    assert vl._md.version("vLLM") == "0.32.0+cpu"
    with pytest.raises(md.PackageNotFoundError):
        vl._md.version("other")


@pytest.mark.engine
def test_launcher_probe_in_the_engine_python():
    p = subprocess.run([str(ENGINE_PYTHON), str(VLLM_LAUNCHER), "--which"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "vllm-cpu 0.32.0"
    h = subprocess.run([sys.executable, str(VLLM_LAUNCHER), "--which"],
                       capture_output=True, text=True, timeout=60)
    assert h.stdout.strip() in ("none",) or h.stdout.startswith("vllm")


# ------------------------------------------------------------------ install --


def test_failed_install_leaves_no_marker(tmp_path):
    from evidence.engines.vllm.install import MARKER, InstallError, install_vllm_cpu, is_installed

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"
    # answers the version check, fails every pip call
    fake.write_text("#!/bin/sh\ncase \"$*\" in *version_info*) echo 3.11;; *) echo 'pip: no network' >&2; exit 1;; esac\n")
    fake.chmod(0o755)
    (venv / MARKER).write_text('{"pins_sha256": "stale"}')
    seen = []
    with pytest.raises(InstallError, match=r"(?s)installing torch==2.13.0\+cpu failed .*no network"):
        install_vllm_cpu(venv, progress=seen.append)
    assert not (venv / MARKER).exists()
    assert not is_installed(venv)
    assert seen and seen[0].startswith("1/5")


@pytest.mark.engine
def test_second_install_is_a_no_op():
    from evidence.engines.vllm.install import install_vllm_cpu, is_installed

    if not is_installed(ROOT / ".venv-vllm"):
        skip_unless_ci(".venv-vllm was installed by hand, not by 'evidence engine install-cpu' (no marker)")
    t = time.monotonic()
    info = install_vllm_cpu(ROOT / ".venv-vllm")
    assert info["skipped"] is True and info["vllm"] == "0.32.0" and info["torch"] == "2.13.0+cpu"
    assert time.monotonic() - t < 2


# -------------------------------------------------------------- real server --


@pytest.mark.engine
def test_real_server_ready_version_and_resolved(vllm_server):
    eng = vllm_server.engine
    assert eng.alive()
    assert eng.version() == "0.32.0"
    r = eng.resolved()
    mnbt = r["max_num_batched_tokens"]
    assert isinstance(mnbt["value"], int) and mnbt["value"] > 0
    assert mnbt["source"].startswith("log: Defaulting max_num_batched_tokens to ")
    assert r["max_num_seqs"]["source"].startswith("log: Defaulting max_num_seqs to ")
    assert r["engine_version"]["value"] == "0.32.0" and r["engine_version"]["requested"] == "0.32.0"
    assert r["dtype"] == {**r["dtype"], "value": "float32", "requested": "float32"}
    assert r["max_model_len"]["value"] == 1024
    assert r["block_size"]["source"].startswith("/metrics cache_config_info")
    assert r["kv_cache_tokens"]["value"] > 0
    assert r["device"]["value"] == "cpu"
    assert r["attention_backend"]["source"].startswith("inferred:")
    for name, entry in r.items():
        assert set(entry) <= {"value", "source", "requested", "also"}, name
        assert entry["source"], name
    d = eng.describe()
    assert d["build"] == {"distribution": "vllm-cpu", "version": "0.32.0"}
    assert d["env_applied"]["VLLM_LOGGING_LEVEL"]["value"] == "DEBUG"
    assert len(group_members(eng.pgid)) >= 2  # API server, engine core (+ worker)


@pytest.mark.engine
def test_endpoint_adapter_on_the_real_server(vllm_server):
    ep = Spec.model_validate({**spec_with().model_dump(), "engine": {"kind": "endpoint", "base_url": vllm_server.base_url}})
    e = make_engine(ep, ROOT)
    assert e.wait_ready(30) >= 0 and e.alive()
    assert e.version() == "0.32.0"
    r = e.resolved()
    assert r["engine_version"] == {"value": "0.32.0", "source": "/version"}
    assert r["block_size"]["source"].startswith("/metrics cache_config_info")
    assert r["max_model_len"]["value"] == 1024 and r["max_model_len"]["source"].startswith("/v1/models")
    assert r["max_num_batched_tokens"] == {"value": None, "source": EXTERNAL}
    e.start(None)
    e.stop()
    assert vllm_server.engine.alive()  # the endpoint adapter never touches someone else's server


@pytest.mark.engine
def test_bad_argument_fails_fast_with_the_log_tail(tiny_model, tmp_path):
    spec = server_spec(tiny_model, extra=["--max-num-seqs", "not-a-number"])
    eng = VllmEngine(spec, ROOT, cache_dir=ROOT / ".cache" / "engine")
    eng.start(tmp_path / "server.log")
    t = time.monotonic()
    with pytest.raises(EngineError) as ei:
        eng.wait_ready(120, poll_s=0.3)
    took = time.monotonic() - t
    msg = str(ei.value)
    assert "exited with code 2" in msg and "before it was ready" in msg
    assert "Last 30 lines of the log:" in msg and "not-a-number" in msg  # argparse's own complaint
    assert took < 60
    assert not eng.alive() and group_members(eng.pgid) == []


@pytest.mark.engine
def test_stop_during_startup_leaves_nothing_and_is_idempotent(tiny_model, tmp_path):
    spec = server_spec(tiny_model)
    with VllmEngine(spec, ROOT, cache_dir=ROOT / ".cache" / "engine") as eng:
        eng.start(tmp_path / "server.log")
        deadline = time.monotonic() + 90
        # wait until vLLM has forked its engine core, so there is a tree to clean up
        while time.monotonic() < deadline and len(group_members(eng.pgid)) < 2 and eng.alive():
            time.sleep(0.5)
        members = group_members(eng.pgid)
        assert len(members) >= 2, f"the engine never forked (log tail: {log_tail(eng.log_path, 10)})"
        t = time.monotonic()
        eng.stop()
        assert time.monotonic() - t < 20
        assert group_members(eng.pgid) == [] and not eng.alive()
        for pid in members:
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
        eng.stop()  # again: nothing happens
    assert group_members(eng.pgid) == []
