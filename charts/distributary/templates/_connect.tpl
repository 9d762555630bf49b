{{/*
The Connect cluster the chart makes (connect.worker): its names, labels and worker settings.
*/}}
{{- define "distributary.connectName" -}}
{{- printf "%s-connect" (include "distributary.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "distributary.connectSelectorLabels" -}}
app.kubernetes.io/name: {{ include "distributary.name" . }}-connect
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "distributary.connectLabels" -}}
helm.sh/chart: {{ include "distributary.chart" . }}
{{ include "distributary.connectSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: connect
app.kubernetes.io/part-of: distributary
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The Connect REST endpoint the operator uses: connect.url, or the chart's own workers'. */}}
{{- define "distributary.connectUrl" -}}
{{- if .Values.connect.url -}}
{{- .Values.connect.url -}}
{{- else if .Values.connect.worker.create -}}
{{- printf "http://%s.%s.svc:8083" (include "distributary.connectName" .) .Release.Namespace -}}
{{- end -}}
{{- end }}

{{/* A Java client's SASL login; the user name and password from the worker's environment
when they come from Secrets. */}}
{{- define "distributary.connectJaas" -}}
{{- $sasl := .Values.kafka.sasl -}}
{{- $module := ternary "org.apache.kafka.common.security.plain.PlainLoginModule" "org.apache.kafka.common.security.scram.ScramLoginModule" (eq $sasl.mechanism "PLAIN") -}}
{{- $username := ternary "${env:DISTRIBUTARY_CONNECT_KAFKA_USERNAME}" $sasl.username (not (empty $sasl.usernameSecret.name)) -}}
{{- printf "%s required username=\"%s\" password=\"${env:DISTRIBUTARY_CONNECT_KAFKA_PASSWORD}\";" $module $username -}}
{{- end }}

{{/*
worker.properties: the chart's settings, then the user's (connect.worker.settings) over them, one
line per key, sorted. As `distributary run` sets its worker (local/connect.py), but:
- exactly.once.source.support: a task's records and its source offsets commit in one Kafka
  transaction, so a worker killed at any point neither loses nor repeats a change;
- scheduled.rebalance.max.delay.ms 0: a worker that left (a pod deleted or rescheduled) hands
  its connectors on at once instead of after Kafka's 5 minutes of waiting for it to return;
- providers: `secrets` (Strimzi's, Sources' passwords through the Kubernetes API), `env` (the
  Kafka user's name and password, from Secrets into the environment) and, with a client
  certificate, `dir` (its key and certificate, mounted from their Secret).
*/}}
{{- define "distributary.connectWorkerProperties" -}}
{{- $worker := .Values.connect.worker -}}
{{- $prefix := default (include "distributary.connectName" .) $worker.topicPrefix -}}
{{- $kafka := .Values.kafka -}}
{{- $sasl := $kafka.sasl -}}
{{- $tls := $kafka.tls -}}
{{- $rf := toString $worker.replicationFactor -}}
{{- $p := dict
  "bootstrap.servers" (include "distributary.bootstrapServers" .)
  "group.id" $prefix
  "config.storage.topic" (printf "%s.configs" $prefix)
  "offset.storage.topic" (printf "%s.offsets" $prefix)
  "status.storage.topic" (printf "%s.status" $prefix)
  "config.storage.replication.factor" $rf
  "offset.storage.replication.factor" $rf
  "status.storage.replication.factor" $rf
  "key.converter" "org.apache.kafka.connect.json.JsonConverter"
  "value.converter" "org.apache.kafka.connect.json.JsonConverter"
  "key.converter.schemas.enable" "false"
  "value.converter.schemas.enable" "false"
  "listeners" "http://0.0.0.0:8083"
  "rest.advertised.port" "8083"
  "exactly.once.source.support" "enabled"
  "producer.transaction.timeout.ms" "10000"
  "plugin.discovery" "service_load"
  "offset.flush.interval.ms" "1000"
  "scheduled.rebalance.max.delay.ms" "0"
  "config.providers" "secrets,env"
  "config.providers.secrets.class" "io.strimzi.kafka.KubernetesSecretConfigProvider"
  "config.providers.env.class" "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
  "config.providers.env.param.allowlist.pattern" "^DISTRIBUTARY_CONNECT_KAFKA_(USERNAME|PASSWORD)$"
-}}
{{- if $tls.clientSecret.name }}
{{- /* Only then: the provider refuses to start on a folder that is not there. */}}
{{- $_ := set $p "config.providers" "secrets,dir,env" }}
{{- $_ := set $p "config.providers.dir.class" "org.apache.kafka.common.config.provider.DirectoryConfigProvider" }}
{{- $_ := set $p "config.providers.dir.param.allowed.paths" "/etc/distributary-connect/kafka/client" }}
{{- end }}
{{- /* The worker's own clients, and those it makes for connectors, alike. */ -}}
{{- range $client := list "" "producer." "consumer." "admin." }}
{{- $_ := set $p (printf "%ssecurity.protocol" $client) $kafka.securityProtocol }}
{{- if $sasl.mechanism }}
{{- $_ := set $p (printf "%ssasl.mechanism" $client) $sasl.mechanism }}
{{- $_ := set $p (printf "%ssasl.jaas.config" $client) (include "distributary.connectJaas" $) }}
{{- end }}
{{- if $tls.caSecret.name }}
{{- $_ := set $p (printf "%sssl.truststore.type" $client) "PEM" }}
{{- $_ := set $p (printf "%sssl.truststore.location" $client) (printf "/etc/distributary-connect/kafka/ca/%s" $tls.caSecret.key) }}
{{- end }}
{{- if $tls.clientSecret.name }}
{{- $_ := set $p (printf "%sssl.keystore.type" $client) "PEM" }}
{{- $_ := set $p (printf "%sssl.keystore.key" $client) (printf "${dir:/etc/distributary-connect/kafka/client:%s}" $tls.clientSecret.keyKey) }}
{{- $_ := set $p (printf "%sssl.keystore.certificate.chain" $client) (printf "${dir:/etc/distributary-connect/kafka/client:%s}" $tls.clientSecret.certificateKey) }}
{{- end }}
{{- end }}
{{- range $key, $value := $worker.settings }}
{{- $_ := set $p $key (toString $value) }}
{{- end }}
{{- range $key := keys $p | sortAlpha }}
{{ $key }}={{ get $p $key }}
{{- end }}
{{- end }}
