# One command per chore; CI runs the same ones.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test unit lint demo crds clean

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

lint: $(STAMP)
	$(BIN)/ruff check operator tests
	$(BIN)/ruff format --check operator tests
	$(BIN)/mypy operator/distributary
	$(BIN)/lint-imports

crds: $(STAMP)
	$(BIN)/distributary crds --out crds

demo: $(STAMP)
	@for ex in examples/clickstream examples/orders; do \
	  echo "== $$ex: validate"; $(BIN)/distributary validate $$ex || exit 1; \
	  echo; echo "== $$ex: plan"; $(BIN)/distributary plan $$ex || exit 1; \
	  echo; echo "== $$ex: graph"; $(BIN)/distributary graph $$ex || exit 1; echo; \
	done

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
