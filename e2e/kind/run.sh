#!/usr/bin/env bash
# `make e2e-kind`: Distributary end to end on a kind cluster (needs Docker, kubectl, Go, Maven).
# Makes the cluster, builds and loads both images, installs the platform (platform.sh), runs the
# clickstream example through an edit and a cutover and checks its outputs (pipeline.sh), runs
# the shop example on Strimzi's Kafka Connect through crashes and a re-snapshot (shop.sh), and
# deletes the cluster on the way out, also on failure or Ctrl-C (KEEP_CLUSTER=1 keeps it, to
# look around with KUBECONFIG=$E2E_STATE/kubeconfig). Exit status 0: every check passed.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need docker kubectl go mvn

# On failure, what a person looks at first, kept in $E2E_STATE/diagnostics.txt.
diagnostics() {
  local out="$E2E_STATE/diagnostics.txt"
  {
    kubectl get nodes,pods --all-namespaces -o wide
    kubectl get kafka,kafkanodepool,kafkauser,kafkatopic --namespace "$KAFKA_NAMESPACE"
    kubectl get dlog,dview,sparkapplications,pvc --namespace "$PIPELINE_NAMESPACE" -o wide
    kubectl describe dview --namespace "$PIPELINE_NAMESPACE"
    kubectl get events --namespace "$PIPELINE_NAMESPACE" --sort-by=.lastTimestamp
    kubectl get kafkaconnect,kafkaconnector --namespace "$KAFKA_NAMESPACE" -o wide
    kubectl get source,dlog,dview,sink,sparkapplications,deployments,jobs \
      --namespace "$SHOP_NAMESPACE" -o wide
    kubectl describe source,sink --namespace "$SHOP_NAMESPACE"
    kubectl get events --namespace "$SHOP_NAMESPACE" --sort-by=.lastTimestamp
    kubectl logs deployment/distributary --namespace "$DISTRIBUTARY_NAMESPACE" --tail=300
  } >"$out" 2>&1 || true
  say "diagnostics in $out"
}

teardown() {
  local status=$?
  trap - EXIT INT TERM
  if ((status != 0)) && [[ -f "$KUBECONFIG" ]]; then
    diagnostics
  fi
  if [[ "${KEEP_CLUSTER:-0}" == 1 ]]; then
    say "KEEP_CLUSTER=1: kind cluster $CLUSTER_NAME kept (KUBECONFIG=$KUBECONFIG)"
  else
    "$E2E_DIR/cluster.sh" down || say "could not delete kind cluster $CLUSTER_NAME"
  fi
  if ((status == 0)); then
    say "PASSED in $((SECONDS / 60)) min"
  else
    say "FAILED (exit $status) after $((SECONDS / 60)) min"
  fi
  exit "$status"
}
trap teardown EXIT
trap 'exit 130' INT TERM

"$E2E_DIR/cluster.sh" up
"$E2E_DIR/images.sh"
"$E2E_DIR/platform.sh"
"$E2E_DIR/pipeline.sh"
"$E2E_DIR/shop.sh"
