#!/usr/bin/env bash
# The Debian packages the tests start for real: PostgreSQL 15 (change data capture with Debezium)
# and Redis; buildah, debootstrap and runc, which build the images and run their containers
# (`make images`, tests/integration/test_images.py); containerd 1.6 and the CNI plugins, which run
# the test node's pods under its kubelet (`distributary.devtools.node`, tests/integration/kube/
# test_node.py). Installs only what is missing, so a machine that has them all pays nothing (no
# apt-get).
#
#   tools/system-packages.sh     install what of them is not there
set -euo pipefail

missing=()
[[ -x /usr/lib/postgresql/15/bin/initdb ]] || missing+=(postgresql-15)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
for tool in buildah debootstrap runc; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  sudo=(sudo)
fi

echo "tools/system-packages.sh: installing ${missing[*]} with apt-get ..." >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
