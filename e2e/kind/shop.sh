#!/usr/bin/env bash
# The shop example on the platform, its Source on Strimzi's Kafka Connect:
# 1. the shop's stores as its own pods (PostgreSQL with wal_level=logical, Redis), its passwords
#    as new Secrets, its database prepared and orders placed before the Source (shop.py prepare);
# 2. a Connect image built and loaded: Strimzi's Kafka image for the Kafka cluster's version
#    (read from the Kafka's status; the image is the one Strimzi names for that version) with
#    Debezium's PostgreSQL plugin; a KafkaConnect on it with connector resources, Kubernetes
#    Secrets as a config provider and a KafkaUser of its own;
# 3. the example applied (its stores' hosts set to the Services): the Source, the view and the
#    Sinks Ready and caught up;
# 4. orders placed by a Job while the Connect pod and then a Sink's pod are deleted; the serving
#    table, the cache and the table Log then checked exactly against the orders (a Job);
# 5. the snapshot epoch raised while orders arrive: the Source snapshots again beside and cuts
#    over, the view reprocesses the new topic and cuts over, the Sinks follow; checked exactly
#    again, against the new topics.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need docker kubectl mvn
DISTRIBUTARY="${DISTRIBUTARY:-$ROOT/.venv/bin/distributary}"
[[ -x "$DISTRIBUTARY" ]] || die "$DISTRIBUTARY is missing: run make install"
[[ -x "${PYTHON:-$ROOT/.venv/bin/python}" ]] || die "the project's Python is missing: make install"
kind="$(kind_binary)"
ns=(--namespace "$SHOP_NAMESPACE")
VIEW=customer-revenue
TABLE_LOG=shop-orders
SINKS=(revenue-table revenue-cache)

# A resource's field in the shop's namespace (a JSONPath expression), empty while it has none.
field() {
  kubectl get "${ns[@]}" "$1" -o "jsonpath=$2" 2>/dev/null || true
}

serving_is() {
  [[ "$(field "$1" '{.status.servingRevision}')" == "$2" ]]
}

topic_of() {
  field "dlog/$1" '{.status.topicName}'
}

# A new random password in Secret NAME (key `password`), unless it has one; it goes through a
# file (mode 600), never an argument or the terminal.
password_secret() {
  local name="$1" folder
  if kubectl get secret "$name" "${ns[@]}" >/dev/null 2>&1; then
    return
  fi
  folder="$(mktemp -d)"
  (umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=\n' >"$folder/password")
  kubectl create secret generic "$name" "${ns[@]}" --from-file=password="$folder/password" \
    >/dev/null
  rm -rf "$folder"
  say "Secret $name made in $SHOP_NAMESPACE"
}

# start_job COMMAND KEY=VALUE...: the Job shop-COMMAND (shop.py COMMAND) with these settings,
# started afresh; finish_job COMMAND waits for it, shows its log and fails when it failed.
start_job() {
  local command="$1"
  shift
  shop_settings "$@" | kubectl apply -f - >/dev/null
  kubectl delete job "shop-$command" "${ns[@]}" --ignore-not-found --wait >/dev/null
  COMMAND="$command" manifest shop-job.yaml COMMAND | kubectl apply -f - >/dev/null
  say "job shop-$command running ..."
}

job_finished() {
  [[ -n "$(field "job/$1" '{.status.succeeded}{.status.failed}')" ]]
}

finish_job() {
  wait_until "job shop-$1 to finish" 1500 job_finished "shop-$1"
  kubectl logs "${ns[@]}" "job/shop-$1" >&2 || true
  [[ "$(field "job/shop-$1" '{.status.succeeded}')" == 1 ]] || die "job shop-$1 failed (its log above)"
}

# The settings every Job is given (the ConfigMap holds one set at a time).
job_settings() {
  printf '%s\n' "EXISTING=$SHOP_EXISTING" "CHECK_SECONDS=900" "RATE=$SHOP_RATE" \
    "ORDERS_TOPIC=$(topic_of "$TABLE_LOG")" "$@"
}

sink_pod() {
  kubectl get pods "${ns[@]}" -l "distributary.dev/sink=$1" -o name 2>/dev/null | head -n 1
}

connect_pod() {
  kubectl get pods --namespace "$KAFKA_NAMESPACE" \
    -l "strimzi.io/cluster=$CONNECT_CLUSTER,strimzi.io/kind=KafkaConnect" -o name 2>/dev/null |
    head -n 1
}

reads() {
  [[ "$(field "dsink/$1" '{.status.topic}')" == "$2" ]]
}

# The view caught up, and each Sink Ready and reading the view's serving topic.
settled() {
  local sink view_topic
  "$DISTRIBUTARY" wait "$VIEW" --caught-up --namespace "$SHOP_NAMESPACE" \
    --kubeconfig "$KUBECONFIG" --timeout 900
  view_topic="$(topic_of "$VIEW")"
  for sink in "${SINKS[@]}"; do
    kubectl wait "${ns[@]}" "dsink/$sink" --for=condition=Ready --timeout=600s >/dev/null
    wait_until "Sink $sink to read $view_topic" 600 reads "$sink" "$view_topic"
  done
  say "$VIEW serves revision $(field "dview/$VIEW" '{.status.servingRevision}') on $view_topic;" \
    "the Sinks read it"
}

# 1. The stores.
for secret in "${SHOP_SECRETS[@]}"; do
  password_secret "$secret"
done
say "applying the shop's PostgreSQL and Redis ..."
manifest shop-stores.yaml POSTGRES_IMAGE REDIS_IMAGE | kubectl apply -f - >/dev/null
for store in postgres redis; do
  kubectl rollout status "deployment/$store" "${ns[@]}" --timeout=600s >&2
done
shop_configmap | kubectl apply -f - >/dev/null
mapfile -t settings < <(job_settings)
start_job prepare "${settings[@]}"
finish_job prepare

# 2. Kafka Connect.
kafka_version="$(kubectl get "kafka/$KAFKA_CLUSTER" --namespace "$KAFKA_NAMESPACE" \
  -o 'jsonpath={.status.kafkaVersion}')"
[[ -n "$kafka_version" ]] || die "Kafka $KAFKA_CLUSTER has no status.kafkaVersion"
base_image="$(kubectl get deployment strimzi-cluster-operator --namespace "$KAFKA_NAMESPACE" \
  -o 'jsonpath={.spec.template.spec.containers[0].env[?(@.name=="STRIMZI_KAFKA_CONNECT_IMAGES")].value}' |
  connect_base_image "$kafka_version")"
[[ -n "$base_image" ]] || die "Strimzi names no Kafka Connect image for Kafka $kafka_version"
context="$(mktemp -d)"
say "fetching Debezium's PostgreSQL plugin $DEBEZIUM_VERSION ..."
debezium_plugin "$context/plugins"
say "building $CONNECT_IMAGE on $base_image (Kafka $kafka_version) ..."
docker build --tag "$CONNECT_IMAGE" --build-arg "BASE_IMAGE=$base_image" \
  --file "$E2E_DIR/connect/Dockerfile" "$context"
rm -rf "$context"
"$kind" load docker-image "$CONNECT_IMAGE" --name "$CLUSTER_NAME"
say "applying KafkaConnect $CONNECT_CLUSTER and its KafkaUser ..."
KAFKA_VERSION="$kafka_version" manifest shop-connect.yaml KAFKA_VERSION CONNECT_IMAGE |
  kubectl apply -f - >/dev/null
kubectl wait "kafkauser/$CONNECT_CLUSTER" --namespace "$KAFKA_NAMESPACE" --for=condition=Ready \
  --timeout=300s
kubectl wait "kafkaconnect/$CONNECT_CLUSTER" --namespace "$KAFKA_NAMESPACE" \
  --for=condition=Ready --timeout=900s

# 3. The example.
say "applying examples/shop (the stores' hosts set to their Services) ..."
shop_resources | kubectl apply "${ns[@]}" -f -
kubectl wait "${ns[@]}" dsrc/shop --for=condition=Ready --timeout=900s
settled
serving_is dsrc/shop 1 || die "Source shop serves revision $(field dsrc/shop '{.status.servingRevision}'), not 1"

# 4. Orders while Connect and a Sink lose their pods.
first=$((SHOP_EXISTING + 1))
mapfile -t settings < <(job_settings "FIRST=$first" "COUNT=$SHOP_ORDERS")
start_job orders "${settings[@]}"
pause=$((SHOP_ORDERS / SHOP_RATE / 3))
sleep "$pause"
pod="$(connect_pod)"
[[ -n "$pod" ]] || die "KafkaConnect $CONNECT_CLUSTER has no pod"
kubectl delete "$pod" --namespace "$KAFKA_NAMESPACE" --wait=false >/dev/null
say "deleted Kafka Connect's $pod while orders arrive"
sleep "$pause"
pod="$(sink_pod "${SINKS[0]}")"
[[ -n "$pod" ]] || die "Sink ${SINKS[0]} has no pod"
kubectl delete "$pod" "${ns[@]}" --grace-period=0 --force --wait=false >/dev/null 2>&1
say "deleted Sink ${SINKS[0]}'s $pod (no grace period) while orders arrive"
finish_job orders
settled
mapfile -t settings < <(job_settings)
start_job check "${settings[@]}"
finish_job check

# 5. A re-snapshot while orders arrive.
before="$(topic_of "$TABLE_LOG")"
epoch="$(field dsrc/shop '{.spec.snapshot.epoch}')"
epoch=$((${epoch:-0} + 1))
say "raising Source shop's snapshot epoch to $epoch while orders arrive ..."
kubectl patch dsrc/shop "${ns[@]}" --type merge -p "{\"spec\":{\"snapshot\":{\"epoch\":$epoch}}}"
first=$((SHOP_EXISTING + SHOP_ORDERS + 1))
mapfile -t settings < <(job_settings "FIRST=$first" "COUNT=$SHOP_ORDERS_AFTER")
start_job orders "${settings[@]}"
wait_until "Source shop to cut over to revision 2" 1500 serving_is dsrc/shop 2
after="$(topic_of "$TABLE_LOG")"
[[ "$after" != "$before" ]] || die "Log $TABLE_LOG still names $before after the cutover"
say "Source shop serves revision 2: Log $TABLE_LOG is on $after (was $before)"
wait_until "$VIEW to cut over to revision 2" 1500 serving_is "dview/$VIEW" 2
finish_job orders
settled
mapfile -t settings < <(job_settings)
start_job check "${settings[@]}"
finish_job check
kubectl get "${ns[@]}" dsrc,dlog,dview,dsink >&2
say "the shop converged through crashes and a re-snapshot; its stores and Log are exactly what" \
  "the orders imply"
