"""The experiment spec: YAML with positions (yamlsrc), the pydantic model (model), the trial plan (plan)."""
