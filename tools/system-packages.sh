#!/usr/bin/env bash
# The Debian packages the tests start for real: PostgreSQL 15 (change data capture with Debezium)
# and Redis. Installs only what is missing, so a machine that has both pays nothing (no apt-get).
#
#   tools/system-packages.sh     install postgresql-15 and redis-server if they are not there
set -euo pipefail

missing=()
[[ -x /usr/lib/postgresql/15/bin/initdb ]] || missing+=(postgresql-15)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)

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
