"""The vLLM adapter: command line, launcher, log dialect, installer of the CPU build."""
