{{- define "sluice-control.labels" -}}
app.kubernetes.io/name: sluice-control
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "sluice-control.selector" -}}
app.kubernetes.io/name: sluice-control
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The Service's DNS name within the cluster. */}}
{{- define "sluice-control.host" -}}
{{ printf "%s.%s.svc" .Release.Name .Release.Namespace }}
{{- end }}

{{/* Every name the serving certificate carries besides the listen address. */}}
{{- define "sluice-control.sans" -}}
{{- $svc := include "sluice-control.host" . }}
{{- $names := list .Release.Name (printf "%s.%s" .Release.Name .Release.Namespace) $svc (printf "%s.%s" $svc .Values.clusterDomain) "$(POD_IP)" }}
{{- join "," (concat $names .Values.tls.extraSANs) }}
{{- end }}
