{{/* Shared names and labels of the gpuplane chart. */}}

{{- define "gpuplane.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-gpuplane, or the release name when it already contains the chart name. */}}
{{- define "gpuplane.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Name of one service's objects: (dict "root" $ "component" "controller"). */}}
{{- define "gpuplane.componentName" -}}
{{- printf "%s-%s" (include "gpuplane.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuplane.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuplane.labels" -}}
{{ include "gpuplane.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: gpuplane
{{- end -}}

{{/* Labels every pod of this release carries (NetworkPolicy peers). */}}
{{- define "gpuplane.releasePodSelector" -}}
app.kubernetes.io/name: {{ include "gpuplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpuplane.image" -}}
{{- $svc := index .root.Values .component -}}
{{- printf "%s/%s:%s" .root.Values.image.registry $svc.image.repository (default (default .root.Chart.AppVersion .root.Values.image.tag) $svc.image.tag) -}}
{{- end -}}

{{/* The controller's gRPC address as seen from inside the cluster. */}}
{{- define "gpuplane.controllerAddress" -}}
{{- printf "%s.%s.svc:%v" (include "gpuplane.componentName" (dict "root" . "component" "controller")) .Release.Namespace .Values.controller.grpcPort -}}
{{- end -}}

{{/* Env shared by every service: logging. */}}
{{- define "gpuplane.commonEnv" -}}
- name: {{ .prefix }}LOG_LEVEL
  value: {{ .root.Values.logLevel | quote }}
- name: {{ .prefix }}LOG_JSON
  value: {{ .root.Values.logJson | quote }}
{{- end -}}

{{- define "gpuplane.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "gpuplane.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "gpuplane.imagePullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Pod scheduling knobs every service has. */}}
{{- define "gpuplane.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Monitoring API present in the cluster (or passed with --api-versions). */}}
{{- define "gpuplane.serviceMonitorsOn" -}}
{{- if and .Values.serviceMonitor.enabled (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor") -}}
true
{{- end -}}
{{- end -}}
