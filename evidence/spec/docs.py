"""The spec's reference, generated from the models: JSON Schema and docs/spec.md.

Field meanings come from each pydantic Field's description, else from FIELD_DOCS
below; every field also has a unit here ("" where a unit makes no sense). A test
fails when a field lacks either, when an entry names no field, or when docs/spec.md
differs from `spec_reference_md()`, so the reference cannot drift from the code.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from evidence.spec import model as m
from evidence.spec.errors import models_in

# dotted field path -> (unit, meaning). The meaning is "" where the Field has a description.
FIELD_DOCS: dict[str, tuple[str, str]] = {
    "name": ("", ""),
    "title": ("", "one-line title shown in reports"),
    "description": ("", "what the experiment is for, in prose"),
    "hardware": ("", "the machine the experiment expects; checked against what is found (a pin)"),
    "hardware.accelerator": ("", ""),
    "hardware.count": ("accelerators", ""),
    "hardware.notes": ("", "free text about the machine (the report shows it for runs without an accelerator)"),
    "engine": ("", "the serving engine: which one, its version, arguments and how to start it"),
    "engine.kind": ("", "'vllm': the harness starts vLLM itself; 'endpoint': measure a server someone else started"),
    "engine.version": ("", ""),
    "engine.args": ("", "server arguments (vllm kind); unset ones keep the engine's defaults"),
    "engine.args.dtype": ("", "weight and activation precision (--dtype)"),
    "engine.args.max_model_len": ("tokens", "longest prompt plus output the server accepts (--max-model-len)"),
    "engine.args.gpu_memory_utilization": ("fraction", "share of accelerator memory vLLM may use (0 to 1)"),
    "engine.args.enable_prefix_caching": ("", "reuse cached prefixes across requests (null: engine default)"),
    "engine.args.enable_chunked_prefill": ("", "split long prefills into chunks (null: engine default)"),
    "engine.args.max_num_batched_tokens": ("tokens", "scheduler token budget per step (null: engine default)"),
    "engine.args.max_num_seqs": ("sequences", "most sequences scheduled per step (null: engine default)"),
    "engine.args.long_prefill_token_threshold": ("tokens", "prefills longer than this are treated as long (null: default)"),
    "engine.args.tensor_parallel_size": ("accelerators", "tensor-parallel degree; tensor x pipeline x data must fit hardware.count"),
    "engine.args.pipeline_parallel_size": ("accelerators", "pipeline-parallel degree"),
    "engine.args.data_parallel_size": ("replicas", "data-parallel replicas"),
    "engine.args.enforce_eager": ("", "disable CUDA graphs (--enforce-eager)"),
    "engine.args.block_size": ("tokens", "KV-cache block size (null: engine default)"),
    "engine.args.seed": ("", "the engine's sampling seed, 0 to 2^32-1 (null: engine default)"),
    "engine.args.extra": ("", ""),
    "engine.env": ("", "environment variables set for the engine process (never secrets: a spec is published)"),
    "engine.launch": ("", "how the harness starts the engine"),
    "engine.launch.python": ("", ""),
    "engine.launch.command": ("", ""),
    "engine.launch.cwd": ("", "working folder of the engine process, relative to the repository (default: the repository root)"),
    "engine.host": ("", "address the started server listens on"),
    "engine.port": ("", "port the started server listens on; 0 picks a free one"),
    "engine.base_url": ("", ""),
    "engine.readiness_timeout_s": ("seconds", "how long to wait for the server to answer before giving up"),
    "engine.restart": ("", "'never': one server for the sweep; 'per_trial': a fresh server for every trial"),
    "engine.api_key_env": ("", ""),
    "model": ("", "the model served"),
    "model.id": ("", ""),
    "model.path": ("", ""),
    "model.revision": ("", ""),
    "model.tokenizer": ("", "tokenizer folder or id, when it differs from the model's"),
    "model.load_format": ("", "how weights are loaded; 'dummy' gives random weights of the real architecture"),
    "model.served_name": ("", "the name requests use (default: model.id)"),
    "model.dummy_weights_note": ("", "caveat printed in reports when the weights are dummy"),
    "code": ("", "the code that ran the experiment"),
    "code.commit": ("", ""),
    "code.allow_dirty": ("", "allow uncommitted changes in this repository (otherwise a clean tree is a pin)"),
    "code.article_commit": ("", ""),
    "workload": ("", "what every request asks for"),
    "workload.dataset": ("", "prompt source; 'random': token sequences drawn from the vocabulary"),
    "workload.input_len": ("tokens", "prompt length"),
    "workload.output_len": ("tokens", "tokens generated per request (max_tokens)"),
    "workload.range_ratio": ("fraction", "lengths are drawn within +/- this share of input_len and output_len (0: exact)"),
    "workload.seed": ("", "seed of the prompts (the same prompts for a point in every repeat)"),
    "workload.request_rate": ("requests/s", "arrival rate; 'inf' sends every request at once (a saturation sweep)"),
    "workload.burstiness": ("", "gamma shape of inter-arrival times (1 = Poisson); finite request_rate only"),
    "workload.ignore_eos": ("", "keep generating past end-of-sequence so every request yields output_len tokens"),
    "workload.prompt_form": ("", "send prompts as token ids or as detokenized text"),
    "workload.endpoint": ("", "the API path requests go to"),
    "workload.temperature": ("", "sampling temperature; 0 greedy; null sends none (the server's generation config applies)"),
    "workload.extra_body": ("", ""),
    "workload.request_timeout_s": ("seconds", ""),
    "sweep": ("", "the points measured and how often"),
    "sweep.points": ("requests in flight", ""),
    "sweep.prompts": ("prompts", "prompts per trial: a table {point: count} or {per_concurrency: n}"),
    "sweep.prompts.per_concurrency": ("prompts", ""),
    "sweep.repeats": ("", "how many times every point is measured, over all server starts; points x repeats <= "
                          "10,000 trials. Not given: one per server start (3 when sweep.sessions is not given "
                          "either or is 1)"),
    "sweep.order": ("", "trial order per repeat: balanced (cyclic Latin square), fixed (ascending), shuffled (seeded)"),
    "sweep.order_seed": ("", "seed of the 'shuffled' order"),
    "sweep.warmup": ("", "requests sent before measuring, not recorded as trials"),
    "sweep.warmup.requests": ("requests", "warm-up requests (0: none)"),
    "sweep.warmup.concurrency": ("requests in flight", "concurrency of the warm-up (default: the point of the trial it precedes)"),
    "sweep.warmup.when": ("", "'once' before the sweep, or 'each_trial' before every trial"),
    "sweep.cooldown_s": ("seconds", "pause between trials"),
    "sweep.sessions": ("server starts", "engine (re)starts: the repeats are split into this many balanced blocks, "
                       "one server each; with 1 every verdict is about that server start, with 2 or more the start "
                       "is the unit of every test, and a claim about the configuration needs 3 or more. Not given: "
                       "one server start per repeat (3 starts of 1 repeat when repeats is not given either; 3 "
                       "blocks with arms), or 1 for an endpoint, which this tool cannot restart"),
    "profile": ("", "a separate, shorter diagnostic run under a profiler (never mixed with the headline numbers)"),
    "profile.enabled": ("", "run the diagnostic profile after the sweep"),
    "profile.tool": ("", "torch profiler or Nsight Systems"),
    "profile.points": ("requests in flight", "sweep points to profile"),
    "profile.prompts": ("prompts", "prompts per profiled point (same forms as sweep.prompts)"),
    "profile.prompts.per_concurrency": ("prompts", ""),
    "profile.window": ("", "which engine steps the profiler records"),
    "profile.window.delay_steps": ("engine steps", "steps skipped before recording"),
    "profile.window.max_steps": ("engine steps", "steps recorded at most (null: no limit)"),
    "profile.kernel_families": ("", "ordered rules classifying kernels by name (first match wins)"),
    "profile.kernel_families.name": ("", "the rule's name"),
    "profile.kernel_families.pattern": ("", "regular expression matched against kernel names"),
    "profile.kernel_families.family": ("", ""),
    "profile.kernel_families.geometry": ("", ""),
    "profile.kernel_families.layer_marker": ("", ""),
    "profile.layers": ("layers", ""),
    "profile.heads": ("heads", ""),
    "profile.nsys_args": ("", "further arguments to `nsys profile`"),
    "analysis": ("", "what the analysis compares and reports"),
    "analysis.comparisons": ("", "pairs of points compared trial by trial (paired by repeat)"),
    "analysis.comparisons.a": ("requests in flight", "first point of the pair"),
    "analysis.comparisons.b": ("requests in flight", "second point (the baseline of the relative difference)"),
    "analysis.comparisons.margin": ("fraction", ""),
    "arms": ("", ""),
    "arms.name": ("", ""),
    "arms.env": ("", ""),
    "arms.args": ("", ""),
    "arms.launch": ("", ""),
    "arms.launch.python": ("", ""),
    "arms.launch.command": ("", ""),
    "arms.launch.cwd": ("", "working folder of this arm's engine process, relative to the repository"),
    "arms.version": ("", ""),
    "analysis.latency_metrics": ("", "latency metrics reported: ttft, tpot, itl, e2el"),
    "analysis.percentiles": ("percent", "latency percentiles reported (0 < p <= 100)"),
    "analysis.cv": ("", "coefficient of variation across repeats: sample (n-1) or population (n)"),
    "analysis.slos_ms": ("milliseconds", "latency objectives per metric, for goodput"),
}


def iter_fields() -> list[tuple[str, type[BaseModel], str, Any]]:
    """(dotted path, owning model, field name, FieldInfo) for every field, depth first in declaration order."""
    out: list[tuple[str, type[BaseModel], str, Any]] = []

    def walk(cls: type[BaseModel], prefix: str) -> None:
        for name, f in cls.model_fields.items():
            out.append((prefix + name, cls, name, f))
            for sub in models_in(f.annotation):
                walk(sub, f"{prefix}{name}.")

    walk(m.Spec, "")
    return out


# fields whose default depends on the rest of the spec (evidence.spec.design): no single value to show
DESIGN_FIELDS = ("sweep.repeats", "sweep.sessions")


def _default(f: Any, path: str = "") -> str:
    if path in DESIGN_FIELDS:
        return "by design (see meaning)"
    if f.is_required():
        return "required"
    v = f.default_factory() if f.default is PydanticUndefined and f.default_factory else f.default
    if isinstance(v, BaseModel):
        return "(section defaults)"
    return json.dumps(v)


def _type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return "mapping"
    if "anyOf" in prop or "oneOf" in prop:
        parts = [_type(p) for p in prop.get("anyOf", prop.get("oneOf", []))]
        return " or ".join(dict.fromkeys(parts))
    if "enum" in prop:
        return " / ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return json.dumps(prop["const"])
    t = prop.get("type", "any")
    if t == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if t == "object":
        return "mapping"
    lo = prop.get("minimum", prop.get("exclusiveMinimum"))
    hi = prop.get("maximum", prop.get("exclusiveMaximum"))
    if t in ("integer", "number") and (lo is not None or hi is not None):
        lo_s = "" if lo is None else (">" if "exclusiveMinimum" in prop else ">=") + _num(lo)
        hi_s = "" if hi is None else ("<" if "exclusiveMaximum" in prop else "<=") + _num(hi)
        return f"{t} {' '.join(s for s in (lo_s, hi_s) if s)}"
    return {"null": "null"}.get(t, t)


def _num(v: float) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def spec_schema() -> dict[str, Any]:
    """JSON Schema of a spec (pydantic's), with every field's meaning and unit ("x-unit") filled in."""
    schema = m.Spec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["description"] = "An `evidence` experiment spec (YAML). Reference: docs/spec.md."
    defs = schema.get("$defs", {})
    for sect in ("Sweep", "Profile"):
        # A prompt table's keys are the points (digits); without saying so, {per_concurrency: n}
        # would match both branches of the oneOf.
        prompts = defs[sect]["properties"]["prompts"]
        for branch in prompts.get("oneOf") or next(b for b in prompts["anyOf"] if "oneOf" in b)["oneOf"]:
            if branch.get("type") == "object":
                branch["propertyNames"] = {"pattern": "^[0-9]+$"}
    for path, cls, name, f in iter_fields():
        props = (schema if cls is m.Spec else defs[cls.__name__])["properties"]
        unit, meaning = FIELD_DOCS.get(path, ("", ""))
        if not props[name].get("description") and meaning:
            props[name]["description"] = meaning
        if unit:
            props[name]["x-unit"] = unit
        if path in DESIGN_FIELDS:
            props[name].pop("default", None)
    return schema


def spec_reference_md() -> str:
    """docs/spec.md: every field with its type, default, unit and meaning."""
    schema = spec_schema()
    defs = schema.get("$defs", {})
    lines = ["# Spec reference", "",
             "Generated by `evidence spec --markdown` from the pydantic models (`evidence/spec/model.py`,",
             "`evidence/spec/docs.py`); do not edit by hand. `evidence spec --schema` prints the JSON Schema.",
             "Unknown keys are errors; numbers are finite (`.inf`/`.nan` are refused; `request_rate` spells",
             "infinity `inf`); a spec file is at most 4 MiB, 64 levels deep, with plain YAML types only.", ""]
    section = None
    for path, cls, name, f in iter_fields():
        top = path.split(".")[0]
        is_section = "." not in path and bool(models_in(f.annotation))
        group = top if is_section or "." in path else ""
        if group != section:
            section = group
            lines += ["", f"## `{group}`" if group else "## Top level", ""]
            if is_section:
                lines += [_cell(schema["properties"][top].get("description", "")), ""]
            lines += ["| field | type | default | unit | meaning |", "|---|---|---|---|---|"]
        if is_section:
            continue
        prop = (schema if cls is m.Spec else defs[cls.__name__])["properties"][name]
        lines.append(f"| `{path}` | {_cell(_type(prop))} | {_cell(_default(f, path))} | {FIELD_DOCS[path][0]} | "
                     f"{_cell(prop.get('description', ''))} |")
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
