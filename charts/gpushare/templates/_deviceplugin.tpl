{{/* The device plugin's command line and RBAC; flags follow webhook/cli/serve_device_plugin.py. */}}
{{- define "gpushare.devicePlugin.args" -}}
- device-plugin
- --memory-unit={{ .Values.devicePlugin.memoryUnit }}
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
