{{/* The device plugin's command line and RBAC; flags follow webhook/cli/serve_device_plugin.py. */}}
{{- define "gpushare.devicePlugin.args" -}}
- device-plugin
- --memory-unit={{ .Values.gpuMemory.unit }}
{{- if eq .Values.gpuMemory.unit "MiB" }}
- --mib-per-device={{ .Values.gpuMemory.mibPerDevice }}
{{- end }}
- --device-plugin-dir={{ .Values.devicePlugin.devicePluginDir }}
- --health-port={{ .Values.devicePlugin.healthPort }}
- --log-format={{ .Values.logFormat }}
- --log-level={{ .Values.logLevel }}
{{- end }}

{{- define "gpushare.devicePlugin.clusterRules" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["list", "watch", "patch"]
- apiGroups: [""]
  resources: ["nodes/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "patch"]
{{- end }}

{{/* The unit label every part counts gpu-mem in (webhook/core/annotations.py unit_mib): GiB, MiB or <N>MiB. */}}
{{- define "gpushare.memoryUnit" -}}
{{- if eq .Values.gpuMemory.unit "GiB" -}}GiB
{{- else if eq (int .Values.gpuMemory.mibPerDevice) 1 -}}MiB
{{- else -}}{{ int .Values.gpuMemory.mibPerDevice }}MiB
{{- end -}}
{{- end }}
