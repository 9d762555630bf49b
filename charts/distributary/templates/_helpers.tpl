{{/*
Names, labels and the settings more than one template derives from values.
*/}}

{{- define "distributary.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "distributary.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "distributary.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "distributary.selectorLabels" -}}
app.kubernetes.io/name: {{ include "distributary.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "distributary.labels" -}}
helm.sh/chart: {{ include "distributary.chart" . }}
{{ include "distributary.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: distributary
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "distributary.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "distributary.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "distributary.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "distributary.jobImage" -}}
{{- default (printf "distributary-spark:%s" .Chart.AppVersion) .Values.spark.jobImage }}
{{- end }}

{{/*
The service account Spark drivers run as: named after the release (`distributary-spark` for a
release named distributary), so two releases never make the same account in one namespace.
*/}}
{{- define "distributary.sparkServiceAccountName" -}}
{{- $default := printf "%s-spark" (include "distributary.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- default $default .Values.spark.driverServiceAccount.name }}
{{- end }}

{{/* The namespace the Strimzi topic operator watches: where KafkaTopics are made. */}}
{{- define "distributary.strimziNamespace" -}}
{{- default .Release.Namespace .Values.strimzi.namespace }}
{{- end }}

{{- define "distributary.bootstrapServers" -}}
{{- if .Values.kafka.bootstrapServers }}
{{- .Values.kafka.bootstrapServers }}
{{- else if eq .Values.topicBackend "strimzi" }}
{{- printf "%s-kafka-bootstrap.%s.svc:9092" .Values.strimzi.cluster (include "distributary.strimziNamespace" .) }}
{{- else }}
{{- fail "kafka.bootstrapServers: the direct topic backend talks to Kafka itself; set it to the brokers' host:port list (e.g. --set kafka.bootstrapServers=kafka.kafka.svc:9092)" }}
{{- end }}
{{- end }}

{{/*
The rules on Distributary's own kinds and their children, granted cluster-wide or in each watched
namespace. Each rule is what the operator does, nothing more:
- kopf watches the three kinds and patches them (finalizers, its progress annotations);
- the operator applies a view's output Log server-side (create + patch);
- status is patched through the /status subresource;
- children carry ownerReferences with blockOwnerDeletion, which needs update on the owner's
  /finalizers (the OwnerReferencesPermissionEnforcement admission plugin);
- events about notable transitions (core v1, as kopf posts them);
- the spark-operator runtime applies, watches and deletes (stops) SparkApplications.
*/}}
{{- define "distributary.resourceRules" -}}
- apiGroups: ["distributary.dev"]
  resources: ["logs"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["distributary.dev"]
  resources: ["derivedviews", "streamjobs", "sources", "sinks"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["distributary.dev"]
  resources: ["logs/status", "derivedviews/status", "streamjobs/status", "sources/status", "sinks/status"]
  verbs: ["get", "patch"]
- apiGroups: ["distributary.dev"]
  resources: ["logs/finalizers", "derivedviews/finalizers", "streamjobs/finalizers", "sources/finalizers", "sinks/finalizers"]
  verbs: ["update"]
{{- if or (include "distributary.connectUrl" .) .Values.connect.cluster (eq .Values.sparkRuntime "local") }}
# A Source's and a Sink's password, read by name (spec.*.passwordSecret), never listed: only
# where Sources (a Connect is given) or Sinks (the local runtime) can run.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}
{{- if and .Values.connect.cluster (not .Values.connect.namespace) (not (include "distributary.connectUrl" .)) }}
# Sources' connectors as Strimzi KafkaConnectors beside each Source, and the ConfigMaps Strimzi
# lists their offsets into (read only).
- apiGroups: ["kafka.strimzi.io"]
  resources: ["kafkaconnectors"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
{{- end }}
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if eq .Values.sparkRuntime "spark-operator" }}
- apiGroups: ["sparkoperator.k8s.io"]
  resources: ["sparkapplications"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# A rewind moves a group only once the old driver pod is gone.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get"]
# Sinks' processes: a Deployment of the job image and the ConfigMap of its spec, each Sink's;
# a suspended revision's SparkApplication manifest, kept in a ConfigMap until it resumes.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "create", "patch"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch", "delete"]
{{- end }}
{{- end }}

{{/*
The checkpoint claim every SparkApplication mounts, or nothing: only under spark-operator and with
a file:// root (an object store needs none); the chart's own name when it makes the claim.
*/}}
{{- define "distributary.checkpointClaim" -}}
{{- $checkpoints := .Values.checkpoints -}}
{{- if and (eq .Values.sparkRuntime "spark-operator") (hasPrefix "file:" $checkpoints.root) -}}
{{- if $checkpoints.claim.create -}}
{{- default (printf "%s-checkpoints" (include "distributary.fullname" .)) $checkpoints.claim.name | trunc 253 -}}
{{- else -}}
{{- $checkpoints.claim.name -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The namespaces the chart makes what pipelines need in (the checkpoint claim, the Spark
drivers' service account), as a JSON list: the watched ones, or the release's when all are. */}}
{{- define "distributary.pipelineNamespaces" -}}
{{- if .Values.watchNamespaces -}}
{{- toJson .Values.watchNamespaces -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end }}
