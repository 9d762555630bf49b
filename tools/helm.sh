#!/usr/bin/env bash
# Helm for the chart's tests and for people, built from the project's own files.
#
# Helm is built once, at the release `testbed/go.mod` requires, from that module (the one kwok is
# built from, so the Kubernetes packages both use are compiled once for both), through the Go
# module proxy (the only network this needs), into the same cache the jars use,
# `distributary.local.jars.cache_root()`: $DISTRIBUTARY_CACHE, else
# ${XDG_CACHE_HOME:-~/.cache}/distributary, then bin/helm-<version>. The binary is moved into place
# only when the build succeeded, so an interrupted build is redone and a finished one is reused
# offline.
#
#   tools/helm.sh              print the path of the cached helm (building it first if needed)
#   tools/helm.sh ARGS...      run that helm with ARGS (e.g. tools/helm.sh lint charts/distributary)
set -euo pipefail

module="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/testbed"
HELM_VERSION="$(awk '$1 == "helm.sh/helm/v3" { print $2 }' "$module/go.mod")"
if [[ -z "$HELM_VERSION" ]]; then
  echo "tools/helm.sh: $module/go.mod requires no helm.sh/helm/v3: run from a Distributary checkout" >&2
  exit 1
fi

cache="${DISTRIBUTARY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/distributary}"
bin_dir="$cache/bin"
helm="$bin_dir/helm-$HELM_VERSION"
work=""

build() {
  if ! command -v go >/dev/null 2>&1; then
    echo "tools/helm.sh: Go is needed once to build helm $HELM_VERSION into $helm:" \
      "install Go 1.26 or newer (https://go.dev/dl/) and run again" >&2
    exit 1
  fi
  mkdir -p "$bin_dir"
  # A scratch folder beside the target, so the final move is a rename on one file system.
  work="$(mktemp -d "$bin_dir/.helm-$HELM_VERSION.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  echo "Building helm $HELM_VERSION from the Go module proxy into $helm (once; a few minutes) ..." >&2
  local started=$SECONDS
  # A copy of the module: -mod=mod may complete go.sum without touching the checkout. Static and
  # reproducible, with kwok's flags (GO_BUILD in devtools/gobuild.py) (so that they share compiled packages); helm reports its
  # version from the variable its Makefile sets.
  cp "$module/go.mod" "$module/go.sum" "$work/"
  # The compiler's garbage collector off below 2 GiB a process, as GO_MEMORY in devtools/gobuild.py.
  (cd "$work" && GOGC="${GOGC:-off}" GOMEMLIMIT="${GOMEMLIMIT:-2GiB}" \
    CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off go build -trimpath -gcflags=all=-dwarf=false \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    -o "$work/helm" helm.sh/helm/v3/cmd/helm >&2)
  mv -f "$work/helm" "$helm"
  echo "Built helm $HELM_VERSION in $((SECONDS - started)) s: $helm" >&2
}

if [[ ! -x "$helm" ]]; then
  # One build at a time (the test fixture and the suite's background builds may both ask): the
  # second waits for the first and takes its binary.
  mkdir -p "$bin_dir"
  exec 9>"$bin_dir/.helm-$HELM_VERSION.lock"
  flock 9
  if [[ ! -x "$helm" ]]; then
    build
  fi
  exec 9>&-
fi

if [[ $# -eq 0 ]]; then
  echo "$helm"
else
  exec "$helm" "$@"
fi
