#!/usr/bin/env bash
# What every script of e2e/kind shares: the pinned versions, the names of the run's namespaces
# and releases, progress lines, waits, and the pieces that the checks (tests/integration/
# test_e2e_kind_checks.py, tests/integration/kube/test_e2e_kind_dry_run.py) render without a
# cluster: the charts' arguments, the edited view, the ConfigMaps of the data Jobs. Sourced.
# The names below are for the scripts that source this file.
# shellcheck disable=SC2034
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"
# shellcheck source=versions.env
source "$E2E_DIR/versions.env"

CLUSTER_NAME="${CLUSTER_NAME:-distributary-e2e}"
# Where the run keeps its kubeconfig and logs; every tool below talks to the kind cluster only.
E2E_STATE="${E2E_STATE:-$ROOT/.distributary/e2e-kind}"
export KUBECONFIG="$E2E_STATE/kubeconfig"

KAFKA_NAMESPACE=kafka
SPARK_NAMESPACE=spark-operator
DISTRIBUTARY_NAMESPACE=distributary
PIPELINE_NAMESPACE=clickstream
KAFKA_CLUSTER=clicks
KAFKA_USER=distributary
# The secrets the Kafka clients read (the KafkaUser's, Strimzi's cluster CA), copied from the
# Kafka namespace into the operator's and the pipeline's (a pod reads its own namespace's only).
KAFKA_SECRETS=("$KAFKA_USER:password" "$KAFKA_CLUSTER-cluster-ca-cert:ca.crt")

EXAMPLE="$ROOT/examples/clickstream"
VIEWS=(enriched-page-views views-per-user views-per-country)
# The edit: the enriched view's filter made stricter. It and views-per-country (which reads its
# output) reprocess and cut over to revision 2; views-per-user reads the raw log and stays at 1.
FILTER_BEFORE="duration_ms >= 0"
THRESHOLD_AFTER=1000

OPERATOR_IMAGE="distributary-operator:$IMAGE_TAG"
SPARK_IMAGE="distributary-spark:$IMAGE_TAG"

# The shop stage (shop.sh): the shop in a namespace of its own, its Source on the KafkaConnect
# CONNECT_CLUSTER (in the Kafka namespace, on an image built by the run), its stores as pods.
SHOP_NAMESPACE=shop
SHOP_EXAMPLE="$ROOT/examples/shop"
CONNECT_CLUSTER=shop-connect
CONNECT_IMAGE="distributary-connect:$IMAGE_TAG"
SHOP_POSTGRES_HOST="postgres.$SHOP_NAMESPACE.svc"
SHOP_REDIS_HOST="redis.$SHOP_NAMESPACE.svc"
# The shop's passwords, each a Secret (key `password`) made anew by the run: PostgreSQL's
# superuser, the application's, the Source's (shop_cdc) and the Sink's (shop_serving).
SHOP_SECRETS=(shop-admin shop-app shop-db serving-db)
# The orders: before the Source, while the Connect pod and a Sink's pod are deleted, and while
# the Source snapshots again.
SHOP_EXISTING=500
SHOP_ORDERS=3000
SHOP_ORDERS_AFTER=1500
SHOP_RATE=50

say() {
  printf '[e2e-kind %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2
}

die() {
  say "FAILED: $*"
  exit 1
}

need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is needed on PATH"
  done
}

helm() {
  "$ROOT/tools/helm.sh" "$@"
}

# kind at KIND_VERSION: from PATH when it is that version, else built once from its Go module
# into the cache tools/helm.sh uses.
kind_binary() {
  local cached
  local cache="${DISTRIBUTARY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/distributary}"
  cached="$cache/bin/kind-$KIND_VERSION"
  if command -v kind >/dev/null 2>&1 &&
    [[ "$(kind version -q 2>/dev/null)" == "${KIND_VERSION#v}" ]]; then
    command -v kind
    return
  fi
  if [[ ! -x "$cached" ]]; then
    need go
    say "building kind $KIND_VERSION from its Go module into $cached (once) ..."
    local work
    work="$(mktemp -d)"
    CGO_ENABLED=0 GOBIN="$work" go install "sigs.k8s.io/kind@$KIND_VERSION" >&2
    mkdir -p "$(dirname "$cached")"
    mv -f "$work/kind" "$cached"
    rm -rf "$work"
  fi
  echo "$cached"
}

# The Spark operator's chart folder, from its Go module at the pinned version.
spark_operator_chart() {
  need go
  local dir
  dir="$(GOFLAGS=-mod=mod go mod download -json "$SPARK_OPERATOR_MODULE@$SPARK_OPERATOR_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -n "$dir" && -d "$dir/charts/spark-operator-chart" ]] ||
    die "no charts/spark-operator-chart in $SPARK_OPERATOR_MODULE@$SPARK_OPERATOR_VERSION"
  echo "$dir/charts/spark-operator-chart"
}

# Each chart's release, namespace, chart and values: one argument a line, after `helm install`.
strimzi_chart_args() {
  printf '%s\n' strimzi "$STRIMZI_CHART" --version "$STRIMZI_VERSION" \
    --namespace "$KAFKA_NAMESPACE" --values "$E2E_DIR/values/strimzi.yaml"
}

spark_operator_chart_args() {
  printf '%s\n' spark-operator "$(spark_operator_chart)" \
    --namespace "$SPARK_NAMESPACE" --values "$E2E_DIR/values/spark-operator.yaml"
}

distributary_chart_args() {
  printf '%s\n' distributary "$ROOT/charts/distributary" \
    --namespace "$DISTRIBUTARY_NAMESPACE" --values "$E2E_DIR/values/distributary.yaml" \
    --set "image.repository=${OPERATOR_IMAGE%:*}" --set "image.tag=$IMAGE_TAG" \
    --set "spark.jobImage=$SPARK_IMAGE"
}

# The example's views with the enriched view's filter made stricter, as YAML on stdout.
edited_views() {
  local views="$EXAMPLE/views.yaml"
  grep -qF "AND $FILTER_BEFORE" "$views" || die "$views has no filter '$FILTER_BEFORE' to edit"
  sed "s/AND $FILTER_BEFORE\$/AND duration_ms >= $THRESHOLD_AFTER/" "$views"
}

# The ConfigMap the data Jobs mount: clicks.py, the page-views Log and the example's data.
clicks_configmap() {
  kubectl create configmap clicks --namespace "$PIPELINE_NAMESPACE" --dry-run=client -o yaml \
    --from-file=clicks.py="$E2E_DIR/clicks.py" \
    --from-file=logs.yaml="$EXAMPLE/logs.yaml" \
    --from-file=page-views.jsonl="$EXAMPLE/data/page-views.jsonl"
}

# The settings of the data Jobs (clicks-run): KEY=VALUE arguments.
clicks_settings() {
  kubectl create configmap clicks-run --namespace "$PIPELINE_NAMESPACE" --dry-run=client -o yaml \
    "${@/#/--from-literal=}"
}

# manifest NAME [VARIABLE...]: e2e/kind/manifests/NAME with each @VARIABLE@ replaced by the value
# of that shell variable (the pins of versions.env, or what the run found out).
manifest() {
  local text name
  text="$(<"$E2E_DIR/manifests/$1")"
  shift
  for name in "$@"; do
    [[ -n "${!name:-}" ]] || die "manifest: $name is not set"
    text="${text//@$name@/${!name}}"
  done
  [[ "$text" != *@[A-Z]*@* ]] || die "manifest: a @VARIABLE@ is left in it: name it"
  printf '%s\n' "$text"
}

# The shop example's Source, view and Sinks as the run applies them: the stores' hosts set to
# the shop's Services (shop.py resources), on stdout.
shop_resources() {
  SHOP_POSTGRES_HOST="$SHOP_POSTGRES_HOST" SHOP_REDIS_HOST="$SHOP_REDIS_HOST" \
    "${PYTHON:-$ROOT/.venv/bin/python}" "$E2E_DIR/shop.py" resources --example "$SHOP_EXAMPLE"
}

# The ConfigMap the shop's Jobs mount: shop.py, the example's app.py and stores.py, and clicks.py
# (its Kafka settings and committed reader).
shop_configmap() {
  kubectl create configmap shop --namespace "$SHOP_NAMESPACE" --dry-run=client -o yaml \
    --from-file=shop.py="$E2E_DIR/shop.py" \
    --from-file=app.py="$SHOP_EXAMPLE/app.py" \
    --from-file=stores.py="$SHOP_EXAMPLE/stores.py" \
    --from-file=clicks.py="$E2E_DIR/clicks.py"
}

# The settings of the shop's Jobs (shop-run): KEY=VALUE arguments.
shop_settings() {
  kubectl create configmap shop-run --namespace "$SHOP_NAMESPACE" --dry-run=client -o yaml \
    "${@/#/--from-literal=}"
}

# connect_base_image KAFKA_VERSION: the image Strimzi runs Kafka Connect of that version on,
# from its STRIMZI_KAFKA_CONNECT_IMAGES (VERSION=IMAGE pairs, apart by blanks or commas) on stdin.
connect_base_image() {
  tr ',[:blank:]' '\n' | awk -F= -v version="$1" '$1 == version { print substr($0, length($1) + 2) }' |
    head -n 1
}

# debezium_plugin FOLDER: Debezium's PostgreSQL connector plugin at DEBEZIUM_VERSION, from Maven
# Central (through mvn, with its checksums), unpacked into FOLDER/debezium-connector-postgres.
debezium_plugin() {
  need mvn
  local folder="$1"
  mkdir -p "$folder"
  mvn -B -q dependency:copy \
    "-Dartifact=io.debezium:debezium-connector-postgres:$DEBEZIUM_VERSION:tar.gz:plugin" \
    "-DoutputDirectory=$folder" >&2
  tar -xzf "$folder/debezium-connector-postgres-$DEBEZIUM_VERSION-plugin.tar.gz" -C "$folder"
  rm -f "$folder/debezium-connector-postgres-$DEBEZIUM_VERSION-plugin.tar.gz"
  [[ -f "$folder/debezium-connector-postgres/debezium-connector-postgres-$DEBEZIUM_VERSION.jar" ]] ||
    die "the Debezium plugin has no connector jar"
}

# wait_until WHAT SECONDS COMMAND...: run COMMAND every 5 s until it succeeds, saying what is
# awaited every 30 s; fail after SECONDS.
wait_until() {
  local what="$1" timeout="$2"
  shift 2
  local started=$SECONDS shown=$SECONDS
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS - started > timeout)); then
      die "timed out after ${timeout}s waiting for $what"
    fi
    if ((SECONDS - shown >= 30)); then
      say "waiting for $what ($((SECONDS - started))s) ..."
      shown=$SECONDS
    fi
    sleep 5
  done
}

# A resource's field (JSONPath), empty when it is not there yet.
field() {
  kubectl get "$@" -o jsonpath 2>/dev/null || true
}
