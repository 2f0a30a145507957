{{- define "sluice-agent.labels" -}}
app.kubernetes.io/name: sluice-agent
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
sluice.dev/cluster: {{ .Values.cluster | quote }}
{{- end }}

{{- define "sluice-agent.selector" -}}
app.kubernetes.io/name: sluice-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sluice-agent.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end }}

{{/* Scrape annotations for a component's admin port. */}}
{{- define "sluice-agent.scrape" -}}
{{- if .root.Values.metrics.annotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}

{{/* Probes on a component's admin port. */}}
{{- define "sluice-agent.probes" -}}
readinessProbe:
  httpGet: {path: /readyz, port: admin}
  periodSeconds: 5
livenessProbe:
  httpGet: {path: /livez, port: admin}
  periodSeconds: 10
  failureThreshold: 6
{{- end }}

{{/* The environment every component gets: its own address. */}}
{{- define "sluice-agent.env" -}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
- name: SLUICE_LOG
  value: info
{{- end }}

{{/* The container security context; binding a port under 1024 adds NET_BIND_SERVICE. */}}
{{- define "sluice-agent.securityContext" -}}
{{- $sc := deepCopy .root.Values.securityContext }}
{{- if lt (int .port) 1024 }}
{{- $_ := set $sc "capabilities" (dict "drop" (list "ALL") "add" (list "NET_BIND_SERVICE")) }}
{{- end }}
{{- toYaml $sc }}
{{- end }}
