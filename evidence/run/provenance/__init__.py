"""Provenance: host, accelerator, packages, engine, model, git, environment; pins requested vs effective."""
