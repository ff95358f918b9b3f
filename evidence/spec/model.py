"""The experiment spec: nested strict pydantic models mirroring the YAML sections.

The spec is data. Nothing downstream reads YAML; every stage takes a validated `Spec`. Models are
frozen and forbid unknown keys so that a typo can never silently change an experiment.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from evidence.metrics import REPORTED_METRICS
from evidence.spec.design import MAX_SESSIONS, default_design, legacy_design
from evidence.spec.errors import SpecError, validate_located
from evidence.spec.yamlsrc import Located, YamlSourceError, read_yaml

HEX40 = re.compile(r"^[0-9a-f]{40}$")
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# The API key's variable when the spec names none: what each server or client reads by convention.
DEFAULT_API_KEY_ENV = {"vllm": "VLLM_API_KEY", "endpoint": "OPENAI_API_KEY"}
# Request fields our client writes itself, and the spec field that sets each.
CLIENT_FIELDS = {
    "model": "model.served_name (or model.id)",
    "prompt": "workload.input_len / workload.prompt_form",
    "max_tokens": "workload.output_len",
    "stream": "nothing: the client always streams, to time every token",
    "stream_options": "nothing: the client asks for usage itself",
    "ignore_eos": "workload.ignore_eos",
    "temperature": "workload.temperature",
}


class _Model(BaseModel):
    # allow_inf_nan=False: YAML's .inf and .nan are refused wherever a number is meant
    # (request_rate spells its infinity 'inf' and checks itself).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


# Upper bounds: far above any real experiment, low enough that no count overflows an
# engine's C int, a plan's memory or a run's lifetime (each bound is a clean error).
MAX_TRIALS = 10_000  # points x repeats
MAX_PROMPTS_PER_TRIAL = 1_000_000
MAX_PROMPTS_PER_RUN = 100_000_000  # every trial's prompts plus warm-up
PosInt = Annotated[int, Field(gt=0, le=2**31 - 1)]
NonNegInt = Annotated[int, Field(ge=0, le=2**31 - 1)]
Concurrency = Annotated[int, Field(gt=0, le=100_000)]
PromptN = Annotated[int, Field(gt=0, le=MAX_PROMPTS_PER_TRIAL)]
Tokens = Annotated[int, Field(gt=0, le=10_000_000)]
Parallel = Annotated[int, Field(gt=0, le=1024)]


class Hardware(_Model):
    """What the experiment must run on; checked against what is found."""

    accelerator: str | None = Field(None, description="expected accelerator model, e.g. 'NVIDIA A100-SXM4-80GB'; null for CPU-only")
    count: Annotated[int, Field(ge=0, le=4096)] = Field(0, description="expected number of accelerators (0 for a CPU run)")
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> "Hardware":
        if self.accelerator and self.count == 0:
            raise ValueError("@count: an accelerator is named but count is 0; give the number of accelerators")
        if not self.accelerator and self.count > 0:
            raise ValueError("@accelerator: count > 0 needs 'accelerator' (the expected model name)")
        return self


class EngineArgs(_Model):
    """Server arguments. Known ones are typed; anything else goes to `extra` verbatim."""

    dtype: Literal["auto", "bfloat16", "float16", "float32", "half", "float"] = "auto"
    max_model_len: PosInt | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    max_num_batched_tokens: PosInt | None = None
    max_num_seqs: PosInt | None = None
    long_prefill_token_threshold: NonNegInt | None = None
    tensor_parallel_size: Parallel = 1
    pipeline_parallel_size: Parallel = 1
    data_parallel_size: Parallel = 1
    enforce_eager: bool = False
    block_size: PosInt | None = None
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = None  # numpy's seed range, which vLLM seeds
    extra: list[str] = Field(default_factory=list, description="further CLI arguments passed to the server as given")


# In engine.launch.command, this word stands for the interpreter running evidence (sys.executable), so a
# spec that starts a Python module (the stand-in) works from any install, venv or not.
PYTHON_PLACEHOLDER = "{python}"


class Launch(_Model):
    """How to start the engine: the python of its own venv, or an explicit command."""

    python: str | None = Field(None, description="python of the engine's venv (the harness runs vLLM's CLI with it)")
    command: list[str] | None = Field(None, description="explicit argv prefix replacing '<python> -m vllm ... serve'; "
                                      f"'{PYTHON_PLACEHOLDER}' stands for the Python running evidence")
    cwd: str | None = None

    @model_validator(mode="after")
    def _one(self) -> "Launch":
        if self.python and self.command:
            raise ValueError("@command: give either 'python' or 'command', not both")
        if self.command is not None and not self.command:
            raise ValueError("@command: is empty; give the program and its arguments, e.g. "
                             f"['{PYTHON_PLACEHOLDER}', '-m', 'evidence.tools.standin']")
        return self

    def argv(self) -> list[str] | None:
        """`command` with the placeholder replaced by this interpreter (None when no command is given)."""
        if not self.command:
            return None
        return [sys.executable if a == PYTHON_PLACEHOLDER else a for a in self.command]

    def missing_program(self, root: Path) -> str | None:
        """Why the command's program cannot be started from `root`, with the fix; None when it can.
        A check of this machine, not of the spec's data: validate and run call it, loading never does."""
        argv = self.argv()
        if not argv:
            return None
        prog = argv[0]
        if "/" in prog:
            q = Path(prog).expanduser()
            base = root / self.cwd if self.cwd else root
            q = q if q.is_absolute() else base / q
            if q.is_file() and os.access(q, os.X_OK):
                return None
            found = f"{q} does not exist" if not q.exists() else f"{q} is not an executable file"
        elif shutil.which(prog):
            return None
        else:
            found = f"{prog!r} is not on PATH"
        return (f"its program {prog!r} cannot be started: {found}. To run a Python module with the Python "
                f"running evidence, write '{PYTHON_PLACEHOLDER}' as the first word (e.g. ['{PYTHON_PLACEHOLDER}', "
                "'-m', 'evidence.tools.standin']); otherwise install the program or fix the path.")


class Engine(_Model):
    kind: Literal["vllm", "endpoint"]
    version: str | None = Field(None, description="expected engine version, e.g. '0.27.1'")
    args: EngineArgs = Field(default_factory=EngineArgs)
    env: dict[str, str] = Field(default_factory=dict)
    launch: Launch = Field(default_factory=Launch)
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 0  # 0: pick a free port
    base_url: str | None = Field(None, description="endpoint kind: URL of a server someone else started")
    readiness_timeout_s: Annotated[float, Field(gt=0)] = 900.0
    restart: Literal["never", "per_trial"] = "never"
    api_key_env: str | None = Field(None, description="name of the environment variable holding the API key (its value "
                                    "is read at run time and never recorded); default VLLM_API_KEY for kind vllm, "
                                    "OPENAI_API_KEY for kind endpoint")

    @property
    def starts_server(self) -> bool:
        """Whether this tool starts the server, so its args and accelerators apply: a spec with a base_url
        points at someone else's (the validator below ties base_url to the kind; the adapters hold the rest)."""
        return self.base_url is None

    def api_key_env_name(self) -> str:
        """The variable the API key is read from: the spec's, else the kind's convention."""
        return self.api_key_env or DEFAULT_API_KEY_ENV[self.kind]

    @field_validator("api_key_env")
    @classmethod
    def _key_env(cls, v: str | None) -> str | None:
        if v is not None and not ENV_NAME.match(v):
            raise ValueError("the NAME of an environment variable (letters, digits, '_'), e.g. MY_API_KEY; "
                             "never the key itself, which must not be written into a spec")
        return v

    @model_validator(mode="after")
    def _kind(self) -> "Engine":
        if self.kind == "endpoint" and not self.base_url:
            raise ValueError("@base_url: engine kind 'endpoint' needs 'base_url'")
        if self.kind == "vllm" and self.base_url:
            raise ValueError("@base_url: only for kind 'endpoint'; the vllm adapter starts its own server")
        if self.base_url and not re.match(r"^https?://", self.base_url):
            raise ValueError("@base_url: must start with http:// or https://")
        key = self.api_key_env_name()
        if key in self.env:
            raise ValueError(f"@env.{key}: the API key's value must come from the environment at run time, not from "
                             "the spec (a spec is published); export it in the shell instead")
        return self


class Model(_Model):
    id: str = Field(description="model id as published, e.g. 'Qwen/Qwen2.5-3B-Instruct'")
    path: str | None = Field(None, description="local folder to serve instead of downloading")
    revision: str | None = Field(None, description="the model repository commit (40 hex digits)")
    tokenizer: str | None = None
    load_format: Literal["auto", "dummy", "safetensors", "pt"] = "auto"
    served_name: str | None = None
    dummy_weights_note: str | None = None

    @field_validator("revision")
    @classmethod
    def _rev(cls, v: str | None) -> str | None:
        if v is not None and not HEX40.match(v):
            raise ValueError("a model revision is a full commit hash: 40 lowercase hex digits")
        return v


class Code(_Model):
    commit: str | None = Field(None, description="the commit of this repository the experiment must run at (a pin)")
    allow_dirty: bool = False
    article_commit: str | None = Field(None, description="the commit an earlier, published experiment ran at (provenance "
                                       "of what the article ran; recorded, never a pin)")

    @field_validator("commit", "article_commit")
    @classmethod
    def _commit(cls, v: str | None) -> str | None:
        if v is not None and not HEX40.match(v):
            raise ValueError("a commit is 40 lowercase hex digits (abbreviated hashes are ambiguous)")
        return v


def _check_request_rate(v: Any) -> Any:
    # One clear message instead of one per union branch.
    if v == "inf" or (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)):
        return float(v) if isinstance(v, int) else v
    raise ValueError("request_rate is 'inf' (every request due at once: a saturation sweep) or a number of "
                     "requests per second greater than 0")


def _json_problem(v: Any, where: str) -> str | None:
    if v is None or isinstance(v, (str, bool, int)):
        return None
    if isinstance(v, float):
        return None if math.isfinite(v) else f"{where}: {v} is not a JSON number"
    if isinstance(v, list):
        return next((p for i, x in enumerate(v) if (p := _json_problem(x, f"{where}[{i}]"))), None)
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                return f"{where}: key {k!r} is not a string"
            if p := _json_problem(x, f"{where}.{k}"):
                return p
        return None
    return f"{where}: {v!r} is not a JSON value (YAML read a {type(v).__name__}; quote it to send a string)"


def _check_extra_body(v: Any) -> Any:
    if not isinstance(v, dict):
        raise ValueError("extra_body is a mapping of request fields to JSON values")
    taken = [k for k in v if k in CLIENT_FIELDS]
    if taken:
        raise ValueError("; ".join(f"'{k}' is set by the client; use {CLIENT_FIELDS[k]}" for k in taken))
    problem = _json_problem(v, "extra_body")
    if problem:
        raise ValueError(problem)
    return v


class Workload(_Model):
    dataset: Literal["random"] = "random"
    input_len: Tokens
    output_len: Tokens
    range_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.0
    seed: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
    request_rate: Annotated[Union[Literal["inf"], Annotated[float, Field(gt=0)]], BeforeValidator(_check_request_rate)] = "inf"
    burstiness: Annotated[float, Field(gt=0)] = 1.0
    ignore_eos: bool = True
    prompt_form: Literal["token_ids", "text"] = "token_ids"
    endpoint: Literal["/v1/completions"] = "/v1/completions"
    # null: send no temperature, so the server's generation config decides (what `vllm bench serve`
    # does, hence the seed article); a number pins it (0 = greedy, the default here).
    temperature: Annotated[float, Field(ge=0)] | None = 0.0
    extra_body: Annotated[dict[str, Any], BeforeValidator(_check_extra_body)] = Field(
        default_factory=dict, description="further request fields merged into every completion request as given "
                                          "(JSON values), e.g. {repetition_penalty: 1.0} to match another client")
    request_timeout_s: Annotated[float, Field(gt=0, le=86400, allow_inf_nan=False)] = Field(
        600.0, description="seconds one request may take before it is recorded as failed")

    @model_validator(mode="after")
    def _rate(self) -> "Workload":
        if self.request_rate == "inf" and self.burstiness != 1.0:
            raise ValueError("@burstiness: only applies to a finite request_rate")
        return self


class PromptsMultiple(_Model):
    per_concurrency: PromptN = Field(description="prompts per point = this x the concurrency")


def _prompts_kind(v: Any) -> str:
    """A table {point: prompts} has integer keys (digit strings in JSON); anything else is the multiple form.

    Choosing the branch first gives the errors of that branch only."""
    if isinstance(v, dict) and v and all(isinstance(k, int) or (isinstance(k, str) and k.isdigit()) for k in v):
        return "Table"
    if isinstance(v, (dict, PromptsMultiple)):
        return "Multiple"
    return "Table"


PromptCount = Annotated[Union[Annotated[dict[Concurrency, PromptN], Tag("Table")], Annotated[PromptsMultiple, Tag("Multiple")]],
                        Discriminator(_prompts_kind)]


def _prompts_for(prompts: PromptCount, point: int) -> int | None:
    if isinstance(prompts, PromptsMultiple):
        return prompts.per_concurrency * point
    return prompts.get(point)


class Warmup(_Model):
    requests: Annotated[int, Field(ge=0, le=MAX_PROMPTS_PER_TRIAL)] = 0
    concurrency: Concurrency | None = None
    when: Literal["once", "each_trial"] = "once"


class Sweep(_Model):
    points: list[Concurrency] = Field(description="max_concurrency values, ascending")
    prompts: PromptCount
    repeats: Annotated[int, Field(gt=0, le=MAX_TRIALS)] = 1  # not given: evidence.spec.design
    order: Literal["balanced", "fixed", "shuffled"] = "balanced"
    order_seed: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | None = None
    warmup: Warmup = Field(default_factory=Warmup)
    cooldown_s: Annotated[float, Field(ge=0)] = 0.0
    sessions: Annotated[int, Field(ge=1, le=MAX_SESSIONS)] = 1  # not given: evidence.spec.design

    @model_validator(mode="after")
    def _points(self) -> "Sweep":
        if not self.points:
            raise ValueError("@points: needs at least one concurrency value")
        if len(set(self.points)) != len(self.points):
            dup = sorted({p for p in self.points if self.points.count(p) > 1})
            raise ValueError(f"@points: must be unique; repeated: {dup}")
        if self.points != sorted(self.points):
            raise ValueError(f"@points: must be in ascending order, e.g. {sorted(self.points)}")
        missing = [p for p in self.points if _prompts_for(self.prompts, p) is None]
        if missing:
            raise ValueError(f"@prompts: no prompt count for point(s) {missing}")
        over = [p for p in self.points if (_prompts_for(self.prompts, p) or 0) > MAX_PROMPTS_PER_TRIAL]
        if over:
            raise ValueError(f"@prompts: more than {MAX_PROMPTS_PER_TRIAL:,} prompts in one trial at point(s) {over}")
        if len(self.points) * self.repeats > MAX_TRIALS:
            raise ValueError(f"@repeats: {len(self.points)} points x {self.repeats} repeats is "
                             f"{len(self.points) * self.repeats:,} trials; a run holds at most {MAX_TRIALS:,}")
        if isinstance(self.prompts, dict):
            extra = sorted(set(self.prompts) - set(self.points))
            if extra:
                raise ValueError(f"@prompts: names point(s) {extra} that are not in 'points'")
        if self.order == "shuffled" and self.order_seed is None:
            raise ValueError("@order_seed: order 'shuffled' needs 'order_seed' so the plan is reproducible")
        if self.order != "shuffled" and self.order_seed is not None:
            raise ValueError("@order_seed: only used with order 'shuffled'")
        if self.sessions > self.repeats:
            raise ValueError(f"@sessions: {self.sessions} sessions need at least as many repeats (repeats is {self.repeats})")
        return self

    def prompts_at(self, point: int) -> int:
        n = _prompts_for(self.prompts, point)
        assert n is not None
        return n


class FamilyRule(_Model):
    """An ordered kernel-classification rule (first match wins), see evidence.traces.analyses.families."""

    name: str
    pattern: str
    family: str | None = Field(None, description="bucket the rule reports into (default: its name)")
    geometry: Literal["opaque", "fa2_splitkv", "persistent"] = Field(
        "opaque", description="what the launch grid means: fa2_splitkv (gridX encodes the query chunk), "
                              "persistent (grid = SM count, no meaning), opaque (listed, not interpreted)")
    layer_marker: bool = Field(False, description="runs once per transformer layer per forward (forward reconstruction)")

    @field_validator("pattern")
    @classmethod
    def _regex(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return v


class ProfileWindow(_Model):
    delay_steps: NonNegInt = 0
    max_steps: PosInt | None = None


class Profile(_Model):
    enabled: bool = False
    tool: Literal["torch", "nsys"] = "torch"
    points: list[Concurrency] = Field(default_factory=list)
    prompts: PromptCount | None = None
    window: ProfileWindow = Field(default_factory=ProfileWindow)
    kernel_families: list[FamilyRule] = Field(default_factory=list)
    layers: PosInt | None = Field(None, description="transformer layers, for forward reconstruction")
    heads: PosInt | None = Field(None, description="attention heads (to read FA2 grids); inferred when absent")
    nsys_args: list[str] = Field(default_factory=list)


class Comparison(_Model):
    a: Concurrency
    b: Concurrency
    # a declared equivalence margin turns "not significant" into a positive claim when both one-sided tests reject
    margin: Annotated[float, Field(gt=0, lt=1)] | None = Field(
        None, description="equivalence margin, a fraction (0.05: the two points are called equivalent when the "
                          "ratio is shown within +-5% by two one-sided tests); null: no equivalence test")

    @model_validator(mode="after")
    def _distinct(self) -> "Comparison":
        if self.a == self.b:
            raise ValueError("@b: a comparison needs two different points")
        return self


if TYPE_CHECKING:
    LatencyMetric = str
else:
    # the latency metrics a spec may name are the registry's reported ones (adding a metric adds it here)
    LatencyMetric = Literal[REPORTED_METRICS]


class AnalysisSection(_Model):
    comparisons: list[Comparison] = Field(default_factory=list)
    latency_metrics: list[LatencyMetric] = Field(default_factory=lambda: ["ttft", "tpot"])
    percentiles: list[Annotated[float, Field(gt=0, le=100)]] = Field(default_factory=lambda: [50.0, 99.0])
    cv: Literal["sample", "population"] = "sample"
    slos_ms: dict[LatencyMetric, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)

    @field_validator("percentiles")
    @classmethod
    def _pcts(cls, v: list[float]) -> list[float]:
        if len(set(v)) != len(v):
            raise ValueError("percentiles must be unique")
        return sorted(v)


class Arm(_Model):
    """A named variant of the engine section: its env and args replace the engine's (one arm per server start)."""

    name: str = Field(description="short id of the arm: lowercase letters, digits, '.', '_', '-'")
    env: dict[str, str] = Field(default_factory=dict, description="added to engine.env for this arm's server starts")
    args: dict[str, Any] = Field(default_factory=dict, description="engine.args fields this arm sets (replacing the "
                                                                   "engine's value, e.g. extra)")
    # another build: its own venv (launch.python) or command, and the version that build must report
    launch: Launch | None = Field(None, description="replaces engine.launch for this arm's server starts")
    version: str | None = Field(None, description="replaces engine.version (the pin) for this arm's server starts")

    @field_validator("name")
    @classmethod
    def _arm_name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError("an arm's name must be 1-64 chars of lowercase letters, digits, '.', '_' or '-'")
        return v


class Spec(_Model):
    name: str = Field(description="short id: lowercase letters, digits, '.', '_', '-'")
    title: str
    description: str = ""
    hardware: Hardware = Field(default_factory=Hardware)
    engine: Engine
    model: Model
    code: Code = Field(default_factory=Code)
    workload: Workload
    sweep: Sweep
    profile: Profile = Field(default_factory=Profile)
    analysis: AnalysisSection = Field(default_factory=AnalysisSection)
    # arms: each server start runs one arm; sweep.sessions is a multiple of the arms (blocks of one start per arm)
    arms: list[Arm] = Field(default_factory=list, description="named variants of the engine (env, args) compared "
                                                              "start by start; empty: one engine")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError("name must be 1-64 chars of lowercase letters, digits, '.', '_' or '-', starting with a letter or digit")
        return v

    @model_validator(mode="after")
    def _cross(self) -> "Spec":
        pts = set(self.sweep.points)
        problems = []
        if self.arms:
            names = [a.name for a in self.arms]
            m = len(names)
            if m < 2 or len(set(names)) != m:
                problems.append(f"@arms: needs 2 or more arms with distinct names, not {names}")
            elif self.sweep.sessions % m or self.sweep.sessions < 2 * m:
                problems.append(f"@sweep.sessions: with {m} arms the server starts come in blocks of {m} (one per "
                                f"arm), at least 2 blocks: sessions must be a multiple of {m} and >= {2 * m}, not "
                                f"{self.sweep.sessions} (not given, it is the repeats when they are such a multiple)")
            for i, a in enumerate(self.arms):
                try:
                    EngineArgs.model_validate({**self.engine.args.model_dump(), **a.args})
                except ValueError as e:
                    problems.append(f"@arms.{i}.args: not valid engine.args ({str(e).splitlines()[0]})")
        for i, c in enumerate(self.analysis.comparisons):
            bad = [p for p in (c.a, c.b) if p not in pts]
            if bad:
                problems.append(f"@analysis.comparisons.{i}: names point(s) {bad} that are not sweep points {self.sweep.points}")
        if self.profile.enabled:
            if not self.profile.points:
                problems.append("@profile.points: profile.enabled is true but no points are given")
            bad = [p for p in self.profile.points if p not in pts]
            if bad:
                problems.append(f"@profile.points: {bad} are not sweep points {self.sweep.points}")
            if self.profile.prompts is None:
                problems.append("@profile.prompts: required when profiling is enabled (a shorter diagnostic workload)")
            else:
                miss = [p for p in self.profile.points if _prompts_for(self.profile.prompts, p) is None]
                if miss:
                    problems.append(f"@profile.prompts: no count for profile point(s) {miss}")
        if self.engine.starts_server and self.engine.args.max_model_len is not None:
            need = self.workload.input_len + self.workload.output_len
            if need > self.engine.args.max_model_len:
                problems.append(f"@engine.args.max_model_len: is {self.engine.args.max_model_len} but the workload needs {need} tokens (input_len + output_len)")
        if self.sweep.warmup.concurrency and self.sweep.warmup.requests == 0:
            problems.append("@sweep.warmup.requests: is 0 but sweep.warmup.concurrency is set")
        wu = self.sweep.warmup
        if self.total_prompts + wu.requests * (self.trial_count if wu.when == "each_trial" else 1) > MAX_PROMPTS_PER_RUN:
            problems.append(f"@sweep.prompts: the run would send more than {MAX_PROMPTS_PER_RUN:,} prompts "
                            "(all trials plus warm-up); split it into several specs")
        ea, hw = self.engine.args, self.hardware
        gpus = ea.tensor_parallel_size * ea.pipeline_parallel_size * ea.data_parallel_size
        if self.engine.starts_server and hw.count > 0 and gpus > hw.count:
            problems.append(f"@engine.args.tensor_parallel_size: tensor x pipeline x data parallel sizes need {gpus} "
                            f"accelerators but hardware.count is {hw.count}")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # Derived views used by plan and reports.
    @property
    def trial_count(self) -> int:
        return len(self.sweep.points) * self.sweep.repeats

    @property
    def total_prompts(self) -> int:
        return sum(self.sweep.prompts_at(p) for p in self.sweep.points) * self.sweep.repeats

    def profile_prompts_at(self, point: int) -> int:
        assert self.profile.prompts is not None
        n = _prompts_for(self.profile.prompts, point)
        assert n is not None
        return n


# ---------------------------------------------------------------- loading ----


def spec_from_located(src: Located, file: str) -> Spec:
    """A spec file's Spec: the repeats and server starts it does not give take the default design first
    (evidence.spec.design; a model validator would cost the JSON mode of spec_from_json)."""
    src = dataclasses.replace(src, data=default_design(src.data))
    return validate_located(Spec, src, file, no_echo=frozenset({"api_key_env", "env"}))


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec; raises SpecError with every located problem."""
    p = Path(path)
    if not p.exists():
        raise SpecError(str(path), [(None, "", "no such file")])
    if p.is_dir():
        raise SpecError(str(path), [(None, "", "this is a folder; give a spec file (YAML)")])
    try:
        src = read_yaml(p)
    except OSError as exc:
        raise SpecError(str(path), [(None, "", f"cannot read the file: {exc.strerror or exc}")]) from None
    except YamlSourceError as exc:
        raise SpecError(str(path), [(pos, "", msg) for pos, msg in exc.problems]) from None
    return spec_from_located(src, str(path))


def spec_to_json(spec: Spec) -> str:
    """The validated spec with defaults filled (what runs store as spec.resolved.json)."""
    from evidence.canon import dumps
    import json as _json

    return dumps(_json.loads(spec.model_dump_json()))


def spec_from_json(text: str) -> Spec:
    """Inverse of spec_to_json (JSON mode lets string keys stand for int keys); older runs keep their design."""
    return Spec.model_validate_json(legacy_design(text))
