# From a fresh checkout, with only Python >= 3.11 and make:
#   make run    install into .venv (again only after pyproject.toml changes), run the workflow
#   make test   the same install, then the tests
#   make lint   ruff and snakemake --lint
# Another configuration or core count: make run CONFIG=config/paper.yaml CORES=8
PYTHON ?= python3
CONFIG ?= config.yaml
CORES ?= 2
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint

run: $(VENV)/installed
	$(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG)

test: $(VENV)/installed
	$(BIN)/pytest

lint: $(VENV)/installed
	$(BIN)/ruff check .
	$(BIN)/snakemake --lint

# The stamp makes the install run once per change of pyproject.toml; the package itself is
# installed editable, so source edits need no re-install.
$(VENV)/installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "attnlab needs Python >= 3.11: make ... PYTHON=python3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -e '.[test]'
	touch $@
