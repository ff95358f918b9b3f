"""Engine adapters: how to start, probe and stop a serving engine (vllm/), or measure an endpoint."""
