"""Formats users already have: results of `vllm bench serve` in (import) and out (export)."""
