#!/usr/bin/env bash
# Builds the operator image (operator_image/) and the job image (spark_images/) from the
# repository and loads both into the kind node, tagged IMAGE_TAG (nothing is pushed or pulled).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need docker
kind="$(kind_binary)"

build() {
  local image="$1" dockerfile="$2" started=$SECONDS
  say "building $image from $dockerfile (the first build takes minutes) ..."
  docker build --tag "$image" --file "$ROOT/$dockerfile" "$ROOT"
  say "built $image in $((SECONDS - started))s"
}

build "$OPERATOR_IMAGE" operator_image/Dockerfile
build "$SPARK_IMAGE" spark_images/Dockerfile
for image in "$OPERATOR_IMAGE" "$SPARK_IMAGE"; do
  say "loading $image into kind cluster $CLUSTER_NAME ..."
  "$kind" load docker-image "$image" --name "$CLUSTER_NAME"
done
