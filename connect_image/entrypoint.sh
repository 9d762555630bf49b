#!/bin/sh
# The Connect image's entry point (under tini): one Kafka Connect worker in distributed mode, its
# settings the mounted worker.properties (the chart's ConfigMap) and, added here, the address other
# workers reach this one at (its pod's), as Connect's REST API forwards requests to the leader.
set -eu
config=${DISTRIBUTARY_CONNECT_CONFIG:-/etc/distributary-connect/worker.properties}
if [ ! -r "$config" ]; then
  echo "distributary-connect: no worker settings at $config: mount them there" \
    "(or name the file in DISTRIBUTARY_CONNECT_CONFIG)" >&2
  exit 2
fi
work=$(mktemp /tmp/worker-XXXXXX.properties)
cp "$config" "$work"
host=${POD_IP:-$(hostname -i | cut -d' ' -f1)}
printf '\nrest.advertised.host.name=%s\n' "$host" >> "$work"
# shellcheck disable=SC2086 # JAVA_OPTS is a list of options
exec java ${JAVA_OPTS:--Xms256m -Xmx512m} \
  -Dlog4j2.configurationFile=/opt/distributary-connect/log4j2.properties \
  -cp '/opt/distributary-connect/jars/*' \
  org.apache.kafka.connect.cli.ConnectDistributed "$work"
