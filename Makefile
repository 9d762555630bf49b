# One command per chore; CI runs the same ones.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test unit integration lint demo crds docs clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing Distributary and its development tools into $(VENV) ..."
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration

lint: $(STAMP)
	$(BIN)/ruff check operator tests
	$(BIN)/ruff format --check operator tests
	$(BIN)/mypy operator/distributary
	$(BIN)/lint-imports

crds: $(STAMP)
	$(BIN)/distributary crds --out crds

docs: $(STAMP)
	$(BIN)/python -c 'from pathlib import Path; from distributary.api.reference import reference_markdown as r; Path("docs/reference.md").write_text(r())'

demo: $(STAMP)
	@for ex in examples/clickstream examples/orders; do \
	  echo "== $$ex: validate"; $(BIN)/distributary validate $$ex || exit 1; \
	  echo; echo "== $$ex: plan"; $(BIN)/distributary plan $$ex || exit 1; \
	  echo; echo "== $$ex: graph"; $(BIN)/distributary graph $$ex || exit 1; echo; \
	done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
