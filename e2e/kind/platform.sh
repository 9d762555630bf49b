#!/usr/bin/env bash
# What the pipelines run on: Strimzi (its chart) with a KRaft Kafka cluster and a KafkaUser, the
# Spark operator (its chart), the checkpoint claims, the Kafka secrets where their readers are,
# and Distributary's chart (watching the clickstream's and the shop's namespaces). Each step waits until what it installed is ready.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need kubectl

install_chart() {
  local args
  mapfile -t args < <("$@")
  say "helm install ${args[0]} (${args[1]}) ..."
  helm upgrade --install "${args[@]}" --wait --timeout 10m
}

# copy_secret NAME:KEY TO_NAMESPACE: the Secret's KEY, and only it, into TO_NAMESPACE.
copy_secret() {
  local name="${1%%:*}" key="${1#*:}" to="$2" folder
  folder="$(mktemp -d)"
  # The value goes through a file (mode 600), never an argument or the terminal.
  kubectl get secret "$name" --namespace "$KAFKA_NAMESPACE" \
    -o "jsonpath={.data.${key//./\\.}}" | base64 -d >"$folder/$key"
  [[ -s "$folder/$key" ]] || die "Secret $KAFKA_NAMESPACE/$name has no $key"
  kubectl create secret generic "$name" --namespace "$to" --from-file="$key=$folder/$key" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  rm -rf "$folder"
  say "Secret $name ($key) copied from $KAFKA_NAMESPACE to $to"
}

namespaces=("$KAFKA_NAMESPACE" "$SPARK_NAMESPACE" "$DISTRIBUTARY_NAMESPACE" "$PIPELINE_NAMESPACE"
  "$SHOP_NAMESPACE")
for namespace in "${namespaces[@]}"; do
  kubectl create namespace "$namespace" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
done

install_chart strimzi_chart_args
say "applying the Kafka cluster $KAFKA_CLUSTER (KRaft, one node pool) and KafkaUser $KAFKA_USER ..."
kubectl apply -f "$E2E_DIR/manifests/kafka.yaml" -f "$E2E_DIR/manifests/kafka-user.yaml"
say "waiting for Kafka $KAFKA_CLUSTER to be Ready (minutes: images are pulled) ..."
kubectl wait "kafka/$KAFKA_CLUSTER" --namespace "$KAFKA_NAMESPACE" --for=condition=Ready \
  --timeout=900s
kubectl wait "kafkauser/$KAFKA_USER" --namespace "$KAFKA_NAMESPACE" --for=condition=Ready \
  --timeout=300s

install_chart spark_operator_chart_args

say "applying the checkpoint claims in $PIPELINE_NAMESPACE and $SHOP_NAMESPACE ..."
kubectl apply -f "$E2E_DIR/manifests/checkpoints.yaml"

for secret in "${KAFKA_SECRETS[@]}"; do
  copy_secret "$secret" "$DISTRIBUTARY_NAMESPACE"
  copy_secret "$secret" "$PIPELINE_NAMESPACE"
  copy_secret "$secret" "$SHOP_NAMESPACE"
done

install_chart distributary_chart_args
kubectl rollout status deployment --namespace "$DISTRIBUTARY_NAMESPACE" --timeout=300s >&2
say "platform ready: Strimzi $STRIMZI_VERSION, Spark operator $SPARK_OPERATOR_VERSION, Distributary"
