# One command per chore; CI runs the same ones.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Integration test modules run on this many workers (pytest-xdist; a module's tests stay
# together on one worker, and the modules that kill runners and brokers share one worker:
# tests/integration/conftest.py `pytest_xdist_make_scheduler`; each worker starts its own broker
# and control plane); 0 runs them in pytest's own process, one module after another.
TEST_WORKERS ?= 3

.PHONY: install system-packages check test unit integration lint demo shop crds docs clean helm chart-lint devcluster e2e-local e2e-kind locks images

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing Distributary and its development tools into $(VENV) ..."
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# PostgreSQL and Redis, which the integration tests start for real (apt-get, only when missing).
system-packages:
	tools/system-packages.sh

# Every test: lint and the unit tests first (`make check`, a few minutes), then the integration
# tests against real parts. The slowest tests are listed at the end of each run.
test: check integration

# What a change must pass before anything slow runs: lint, types, import contracts, unit tests.
# The two run side by side (mypy keeps one core busy, the unit tests both), each one's output
# shown whole when it ends.
check: $(STAMP)
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint unit

unit: $(STAMP)
	$(BIN)/python -m pytest -n 2 tests/unit

# What the test beds build once per machine (Go programs, jars) is built in the background
# meanwhile (DISTRIBUTARY_BUILD_AHEAD), while the tests that need none of it run first.
integration: $(STAMP) system-packages
	DISTRIBUTARY_BUILD_AHEAD=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) tests/integration

lint: $(STAMP)
	@echo "== lint: ruff, mypy, import contracts"
	$(BIN)/ruff check operator tests bench e2e
	$(BIN)/ruff format --check operator tests bench e2e
	$(BIN)/mypy operator/distributary
	$(BIN)/lint-imports

# The shop example end to end on one machine: orders written only to PostgreSQL, a Source, a view,
# Sinks into a PostgreSQL table and Redis, parts killed with SIGKILL meanwhile, the stores checked
# exactly against the orders (examples/shop/README.md).
shop: $(STAMP) system-packages
	$(BIN)/python examples/shop/run.py

crds: $(STAMP)
	$(BIN)/distributary crds --out crds
	cp crds/*.yaml charts/distributary/crds/

# A local Kubernetes control plane (etcd, kube-apiserver, the garbage collector, the namespace
# and EndpointSlice controllers) on loopback; ARGS=--node adds a real node (kubelet, containerd,
# kube-proxy, kube-scheduler, cluster DNS; as root) and makes the API server reachable from pods. The first run builds the binaries from Go modules (minutes), later runs
# reuse them.
devcluster: $(STAMP)
	$(BIN)/python -m distributary.devtools.devcluster $(ARGS)

# The clickstream example through the operator on a local control plane, embedded Kafka and
# local Spark: applied with kubectl, Ready and caught up, summarised, torn down.
e2e-local: $(STAMP)
	$(BIN)/python e2e/local.py

# The clickstream example end to end on a kind cluster, where Docker is (and kubectl and Go):
# Strimzi's Kafka over SASL_SSL, the Spark operator, both images built and loaded, the chart; an
# edit and its cutover; the outputs checked exactly; the cluster deleted. See e2e/kind/run.sh.
e2e-kind: $(STAMP)
	DISTRIBUTARY=$(BIN)/distributary e2e/kind/run.sh

helm:
	tools/helm.sh version --short

chart-lint:
	tools/helm.sh lint --strict charts/distributary

docs: $(STAMP)
	$(BIN)/python -c 'from pathlib import Path; from distributary.api.reference import reference_markdown as r; Path("docs/reference.md").write_text(r())'

# The operator, job and Connect images, from their Dockerfiles, without Docker or a registry:
# buildah on a Debian base made by debootstrap (distributary.devtools.images); OCI archives in
# ~/.cache/distributary/images, rebuilt only when what they are built from changes. ARGS=--again
# builds them anew and says whether the digests are the same (reproducible builds).
images: $(STAMP)
	$(BIN)/python -m distributary.devtools.images $(ARGS)

# The images' Python dependencies, each pinned with its hashes, for the images' Python (3.11) on
# linux x86_64: the operator's without the spark extra; the job image's with it, pyspark (Spark's
# jars) included. uv reads the system's certificate authorities (--native-tls). Then the Connect
# image's jars, each with its digest, as Maven resolves them (connect_image/jars.sha256).
UV ?= $(BIN)/uv
LOCK := $(UV) pip compile pyproject.toml --native-tls --quiet --generate-hashes --python-version 3.11 \
  --python-platform x86_64-manylinux_2_35 --custom-compile-command 'make locks'

locks: $(STAMP)
	@echo "Locking operator_image/requirements.lock and spark_images/requirements.lock ..."
	$(LOCK) -o operator_image/requirements.lock
	$(LOCK) --extra spark -o spark_images/requirements.lock
	$(BIN)/python -m distributary.devtools.jar_lock

DEMO_STATE := .distributary/demo
CLICKS := examples/clickstream

# Runs the clickstream pipeline for real: embedded Kafka, local Spark, its demo data, until every
# view has caught up; then shows a few records of each view's output. A fresh state each time.
demo: $(STAMP)
	@rm -rf $(DEMO_STATE) && mkdir -p $(DEMO_STATE)
	@echo "== $(CLICKS): validate"; $(BIN)/distributary validate $(CLICKS)
	@echo; echo "== $(CLICKS): plan"; $(BIN)/distributary plan $(CLICKS) --topic-backend direct
	@echo; echo "== $(CLICKS): run until caught up"
	$(BIN)/distributary run $(CLICKS) --state-dir $(DEMO_STATE) --until-caught-up \
	  --produce users=$(CLICKS)/data/users.jsonl \
	  --produce page-views=$(CLICKS)/data/page-views.jsonl > $(DEMO_STATE).summary.json
	@echo; echo "== the outputs (summary in $(DEMO_STATE).summary.json)"
	$(BIN)/distributary tail enriched-page-views views-per-user views-per-country \
	  views-with-plan -n 3 --state-dir $(DEMO_STATE)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .distributary
