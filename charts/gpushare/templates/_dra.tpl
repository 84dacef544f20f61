{{/* The DRA driver's names, command line and RBAC; flags follow webhook/cli/serve_dra_driver.py. */}}
{{- define "gpushare.dra.name" -}}{{ include "gpushare.fullname" . }}-dra-driver{{- end }}

{{- define "gpushare.dra.args" -}}
- dra-driver
- --driver-name={{ .Values.dra.driverName }}
- --memory-unit={{ .Values.gpuMemory.unit }}
{{- if eq .Values.gpuMemory.unit "MiB" }}
- --mib-per-device={{ .Values.dra.mibStep }}
{{- end }}
- --registry-dir={{ .Values.dra.registryDir }}
- --plugins-dir={{ .Values.dra.pluginsDir }}
- --cdi-dir={{ .Values.dra.cdiDir }}
- --health-port={{ .Values.dra.healthPort }}
{{- with .Values.dra.mps }}
{{- if .enabled }}
- --mps
{{- end }}
- --mps-pipe-dir={{ .pipeDir }}
- --mps-log-dir={{ .logDir }}
{{- end }}
- --log-format={{ .Values.logFormat }}
- --log-level={{ .Values.logLevel }}
{{- end }}

{{/* What webhook/dra calls: its Node (labels: the mode; UID: the slice's owner), its node's ResourceSlice
(webhook/kube/draobjects.py) and the ResourceClaims the kubelet asks it to prepare. */}}
{{- define "gpushare.dra.clusterRules" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch"]
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceslices"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims"]
  verbs: ["get"]
{{- end }}

{{/* The CEL selector of both DeviceClasses: every device of our driver. */}}
{{- define "gpushare.dra.selector" -}}
- cel:
    expression: {{ printf "device.driver == '%s'" .Values.dra.driverName | quote }}
{{- end }}
