#!/usr/bin/env bash
# The kind cluster of the run: `cluster.sh up` makes it (one node, the pinned node image) and
# writes its kubeconfig to $E2E_STATE/kubeconfig; `cluster.sh down` deletes it.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

kind="$(kind_binary)"

case "${1:-}" in
  up)
    need docker
    mkdir -p "$E2E_STATE"
    if "$kind" get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
      say "kind cluster $CLUSTER_NAME exists: using it"
    else
      say "creating kind cluster $CLUSTER_NAME ($KIND_NODE_IMAGE) ..."
      "$kind" create cluster --name "$CLUSTER_NAME" --image "$KIND_NODE_IMAGE" --wait 180s
    fi
    "$kind" get kubeconfig --name "$CLUSTER_NAME" >"$KUBECONFIG"
    kubectl get nodes -o wide >&2
    ;;
  down)
    say "deleting kind cluster $CLUSTER_NAME ..."
    "$kind" delete cluster --name "$CLUSTER_NAME"
    rm -f "$KUBECONFIG"
    ;;
  *)
    echo "usage: $0 up|down" >&2
    exit 2
    ;;
esac
