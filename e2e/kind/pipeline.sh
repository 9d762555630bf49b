#!/usr/bin/env bash
# The clickstream example on the platform: applied with kubectl, its data appended, every view
# Ready and caught up at revision 1; then the enriched view's filter made stricter, and the
# cutover awaited (it and views-per-country at revision 2, views-per-user still at 1); then every
# view's serving topic compared exactly with what the data implies (clicks.py, in a Job).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need kubectl
DISTRIBUTARY="${DISTRIBUTARY:-$ROOT/.venv/bin/distributary}"
[[ -x "$DISTRIBUTARY" ]] || die "$DISTRIBUTARY is missing: run make install"
ns=(--namespace "$PIPELINE_NAMESPACE")

# A resource's field (a JSONPath expression), empty while it has none.
field() {
  kubectl get "${ns[@]}" "$1" -o "jsonpath=$2" 2>/dev/null || true
}

serving_is() {
  [[ "$(field "dview/$1" '{.status.servingRevision}')" == "$2" ]]
}

# run_job NAME KEY=VALUE...: the data Job NAME with its settings; its log; fails when it does.
run_job() {
  local name="$1"
  shift
  clicks_settings "$@" | kubectl apply -f - >/dev/null
  kubectl delete job "$name" "${ns[@]}" --ignore-not-found --wait >/dev/null
  kubectl apply -f "$E2E_DIR/manifests/$name.yaml" >/dev/null
  say "job $name running ..."
  wait_until "job $name to finish" 600 job_finished "$name"
  kubectl logs "${ns[@]}" "job/$name" >&2 || true
  [[ "$(field "job/$name" '{.status.succeeded}')" == 1 ]] || die "job $name failed (its log above)"
}

job_finished() {
  local ended
  ended="$(field "job/$1" '{.status.succeeded}{.status.failed}')"
  [[ -n "$ended" ]]
}

# caught_up VIEW...: Ready, then `distributary wait --caught-up` for each.
caught_up() {
  local view
  for view in "$@"; do
    kubectl wait "${ns[@]}" "dview/$view" --for=condition=Ready --timeout=600s >/dev/null
    "$DISTRIBUTARY" wait "$view" --caught-up --namespace "$PIPELINE_NAMESPACE" \
      --kubeconfig "$KUBECONFIG" --timeout 900
    say "$view caught up at revision $(field "dview/$view" '{.status.servingRevision}')"
  done
}

topic_of() {
  field "dlog/$1" '{.status.topicName}'
}

say "kubectl apply -f examples/clickstream/logs.yaml"
clicks_configmap | kubectl apply -f - >/dev/null
kubectl apply "${ns[@]}" -f "$EXAMPLE/logs.yaml"
kubectl wait "${ns[@]}" dlog/page-views --for=condition=Ready --timeout=300s
page_views="$(topic_of page-views)"
[[ -n "$page_views" ]] || die "Log page-views is Ready without status.topicName"

say "appending examples/clickstream/data/page-views.jsonl to $page_views ..."
run_job clicks-produce "PAGE_VIEWS_TOPIC=$page_views"

say "kubectl apply -f examples/clickstream/views.yaml"
kubectl apply "${ns[@]}" -f "$EXAMPLE/views.yaml"
caught_up "${VIEWS[@]}"
for view in "${VIEWS[@]}"; do
  serving_is "$view" 1 ||
    die "$view serves revision $(field "dview/$view" '{.status.servingRevision}'), not 1"
done

say "editing enriched-page-views: duration_ms >= $THRESHOLD_AFTER (a reprocess) ..."
edited_views | kubectl apply "${ns[@]}" -f -
for view in enriched-page-views views-per-country; do
  wait_until "$view to cut over to revision 2" 1200 serving_is "$view" 2
  say "$view cut over to revision 2"
done
caught_up "${VIEWS[@]}"
serving_is views-per-user 1 || die "views-per-user left revision 1, though its input did not change"

say "checking every output against what the input implies ..."
run_job clicks-check \
  "ENRICHED_TOPIC=$(topic_of enriched-page-views)" \
  "PER_USER_TOPIC=$(topic_of views-per-user)" \
  "PER_COUNTRY_TOPIC=$(topic_of views-per-country)" \
  "THRESHOLD=$THRESHOLD_AFTER"
kubectl get "${ns[@]}" dlog,dview >&2
say "the pipeline converged, cut over, and its outputs are exactly what its input implies"
