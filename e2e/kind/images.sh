#!/usr/bin/env bash
# Puts the operator image (operator_image/) and the job image (spark_images/) into the kind node,
# tagged IMAGE_TAG; nothing is pushed or pulled from a registry for them.
#
# IMAGES_FROM=archives (the default where buildah and debootstrap are installed, as on the test
# bed): the very OCI archives the pods tests import into their node, `make images`'s (buildah, on
# a Debian base made by debootstrap, cached in ~/.cache/distributary/images), imported into the
# node's containerd as the test bed's node imports them. So the kind run and the pods tests run
# the same bytes. IMAGES_FROM=docker (the default elsewhere): `docker build` of the same
# Dockerfiles on Debian's registry image, then `kind load`.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need docker
kind="$(kind_binary)"

images_from="${IMAGES_FROM:-}"
if [[ -z "$images_from" ]]; then
  if command -v buildah >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1; then
    images_from=archives
  else
    images_from=docker
  fi
fi

build() {
  local image="$1" dockerfile="$2" started=$SECONDS
  say "building $image from $dockerfile (the first build takes minutes) ..."
  docker build --tag "$image" --file "$ROOT/$dockerfile" "$ROOT"
  say "built $image in $((SECONDS - started))s"
}

from_docker() {
  build "$OPERATOR_IMAGE" operator_image/Dockerfile
  build "$SPARK_IMAGE" spark_images/Dockerfile
  for image in "$OPERATOR_IMAGE" "$SPARK_IMAGE"; do
    say "loading $image into kind cluster $CLUSTER_NAME ..."
    "$kind" load docker-image "$image" --name "$CLUSTER_NAME"
  done
}

# containerd of every node of the cluster, in the namespace the kubelet reads.
node_ctr() {
  local node="$1"
  shift
  docker exec -i "$node" ctr --namespace k8s.io "$@"
}

from_archives() {
  local python="${PYTHON:-$ROOT/.venv/bin/python}" listing tag archive node wanted
  say "building the images with buildah (make images; cached between runs) ..."
  # One line per image: NAME:VERSION DIGEST ARCHIVE.
  listing="$("$python" -m distributary.devtools.images operator spark)"
  while read -r tag _ archive _; do
    wanted="docker.io/library/${tag%:*}:$IMAGE_TAG"
    for node in $("$kind" get nodes --name "$CLUSTER_NAME"); do
      say "loading $archive into $node as $wanted ..."
      # The archive names its image NAME:VERSION, a partial reference that containerd drops
      # unless given as the base name; the pods name it by IMAGE_TAG.
      node_ctr "$node" images import --base-name "$tag" - <"$archive" >/dev/null
      node_ctr "$node" images tag --force "$tag" "$wanted" >/dev/null
      node_ctr "$node" images rm "$tag" >/dev/null
      node_ctr "$node" images ls --quiet | grep -qx "$wanted" ||
        die "$archive holds no image $tag: containerd of $node does not list $wanted"
    done
  done <<<"$listing"
}

case "$images_from" in
  archives) from_archives ;;
  docker) from_docker ;;
  *) die "IMAGES_FROM is '$images_from': set it to archives or docker" ;;
esac
