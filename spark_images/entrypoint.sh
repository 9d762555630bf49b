#!/bin/bash
# The job image's entry point, as Spark on Kubernetes calls it: the driver pod's container gets
# `driver <spark-submit arguments>`, an executor pod's `executor` with its settings in SPARK_*
# variables. Anything else runs as given (`python -m distributary.runner --help`, a shell).
# Every command runs under tini, which reaps the JVM's and Python's children and passes signals.
set -euo pipefail

# An arbitrary uid (OpenShift's restricted profile) gets a passwd entry: the JVM and Hadoop ask
# for the user's name and home.
if ! getent passwd "$(id -u)" > /dev/null && [ -w /etc/passwd ]; then
  echo "$(id -u):x:$(id -u):$(id -g):spark:/tmp:/usr/sbin/nologin" >> /etc/passwd
fi

classpath="${SPARK_HOME}/jars/*"
if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then
  classpath="${classpath}:${SPARK_EXTRA_CLASSPATH}"
fi
if [ -n "${SPARK_CONF_DIR:-}" ]; then
  classpath="${SPARK_CONF_DIR}:${classpath}"
fi

case "${1:-}" in
  driver)
    shift
    set -- "$0" drive "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  drive)
    # Under tini: spark-submit runs the runner (Python) as its child. A stop (the kubelet's
    # SIGTERM, passed on by tini) goes to that child, which finishes its micro-batch, commits
    # and exits; spark-submit then exits with the runner's status. Sent to spark-submit itself,
    # the JVM would exit at once, with 143, under the runner.
    shift
    "$@" &
    submit=$!
    # shellcheck disable=SC2329 # the trap calls it
    stop() {
      children=$(pgrep -P "$submit" || true)
      # shellcheck disable=SC2086 # one pid per word
      kill -TERM ${children:-$submit} 2> /dev/null || true
    }
    trap stop TERM INT
    status=0
    while kill -0 "$submit" 2> /dev/null; do
      wait "$submit" && status=0 || status=$?
    done
    exit "$status"
    ;;
  executor)
    shift
    # The executor's JVM options arrive as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order.
    options=()
    for index in $(compgen -v SPARK_JAVA_OPT_ | sed 's/^SPARK_JAVA_OPT_//' | sort -n); do
      name="SPARK_JAVA_OPT_${index}"
      options+=("${!name}")
    done
    set -- "${JAVA_HOME}/bin/java" "${options[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "${classpath}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
esac
exec /usr/bin/tini -s -- "$@"
