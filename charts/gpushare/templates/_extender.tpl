{{/* The extender's command line and RBAC rules; flags follow webhook/cli/serve_extender.py. */}}
{{- define "gpushare.extender.args" -}}
- extender
- --host=0.0.0.0
- --port={{ .Values.extender.port }}
- --memory-unit={{ include "gpushare.memoryUnit" . }}
{{- if .Values.extender.leaderElection.enabled }}
- --leader-elect
- --lease-name={{ .Values.extender.leaderElection.leaseName }}
- --lease-namespace={{ .Release.Namespace }}
{{- /* Followers forward bind to the leader at the URL it publishes on the Lease; the kubelet expands
$(POD_IP) from the container's env. The extender serves plain HTTP in this chart. */}}
- --advertise-url=http://$(POD_IP):{{ .Values.extender.port }}
{{- end }}
- --log-format={{ .Values.logFormat }}
- --log-level={{ .Values.logLevel }}
{{- end }}

{{- define "gpushare.extender.clusterRules" -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# The placement annotations travel inside the Binding, so no pods patch is needed.
- apiGroups: [""]
  resources: ["pods/binding"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
{{- end }}

{{- define "gpushare.extender.leaseRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: [{{ .Values.extender.leaderElection.leaseName | quote }}]
  verbs: ["get", "update"]
{{- end }}

{{/* KubeSchedulerConfiguration v1 `extenders` entry (contracts §5.1); mode (a) and mode (b) share it. */}}
{{- define "gpushare.extender.schedulerEntry" -}}
- urlPrefix: {{ include "gpushare.extender.urlPrefix" . | quote }}
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: {{ .Values.extender.weight }}
  enableHTTPS: false
  nodeCacheCapable: true
  httpTimeout: {{ .Values.extender.httpTimeout }}
  ignorable: false
  managedResources:
    - name: {{ .Values.gpuResources.memory }}
      ignoredByScheduler: false
{{- end }}

{{/* Mode (b): the second scheduler's whole KubeSchedulerConfiguration. */}}
{{- define "gpushare.scheduler.config" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: {{ gt (int .Values.scheduler.replicas) 1 }}
  resourceLock: leases
  resourceName: {{ .Values.scheduler.schedulerName }}
  resourceNamespace: {{ .Release.Namespace }}
profiles:
  - schedulerName: {{ .Values.scheduler.schedulerName }}
extenders:
  {{- include "gpushare.extender.schedulerEntry" . | nindent 2 }}
{{- end }}
