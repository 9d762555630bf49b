#!/bin/sh
# fetch_jars.sh LOCK FOLDER REPOSITORY, in an image build: each jar that LOCK names (lines
# `SHA256  PATH`, PATH in a Maven repository's layout, as `make locks` writes them) downloaded
# from REPOSITORY into FOLDER, then checked against its digest: a jar that changed fails the build
# instead of slipping in. curl comes from Debian's packages; TLS is checked with the build secret
# `ca` when given (a proxy's authority), else with Debian's authorities. Used by the job image
# and the Connect image.
set -eu
lock=$1 folder=$2 repository=$3
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends ca-certificates curl > /dev/null
ca=/etc/ssl/certs/ca-certificates.crt
if [ -s /run/secrets/ca ]; then ca=/run/secrets/ca; fi
mkdir -p "$folder"
checked=$(mktemp)
while read -r digest path; do
  curl --fail --silent --show-error --location --retry 3 --cacert "$ca" \
    -o "$folder/${path##*/}" "$repository/$path"
  echo "$digest  $folder/${path##*/}"
done < "$lock" > "$checked"
sha256sum --quiet -c "$checked"
rm "$checked"
