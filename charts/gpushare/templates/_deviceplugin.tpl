{{/* The device plugin's command line and RBAC; flags follow webhook/cli/serve/device_plugin.py. */}}
{{- define "gpushare.devicePlugin.args" -}}
- device-plugin
- --memory-unit={{ .Values.gpuMemory.unit }}
{{- if eq .Values.gpuMemory.unit "MiB" }}
- --mib-per-device={{ .Values.gpuMemory.mibPerDevice }}
{{- end }}
- --device-plugin-dir={{ .Values.devicePlugin.devicePluginDir }}
{{- if .Values.devicePlugin.podResourcesDir }}
- --pod-resources-socket={{ .Values.devicePlugin.podResourcesDir }}/kubelet.sock
{{- else }}
- --pod-resources-socket=
{{- end }}
- --whole-card-resource={{ .Values.gpuResources.wholeCard }}
- --health-port={{ .Values.devicePlugin.healthPort }}
{{- include "gpushare.cdi.args" . | nindent 0 }}
{{- include "gpushare.simulatedGpus" . }}
{{- with .Values.devicePlugin.mps }}
{{- if .enabled }}
- --mps
{{- end }}
- --mps-pipe-dir={{ .pipeDir }}
- --mps-log-dir={{ .logDir }}
{{- end }}
{{- with .Values.devicePlugin.usage }}
{{- if and .overShare.evict (not .interval) }}
{{- fail "devicePlugin.usage.overShare.evict needs GPU usage: devicePlugin.usage.interval must not be 0" }}
{{- end }}
- --usage-interval={{ .interval }}
{{- if and .interval .hostProc }}
- --proc-root=/host/proc
{{- end }}
- --overshare-grace={{ .overShare.grace }}
- --overshare-event-interval={{ .overShare.eventInterval }}
{{- if .overShare.evict }}
- --overshare-evict
{{- end }}
{{- end }}
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
# get: marking a pod assigned reads it first to check its UID (webhook/kube/pods.py); the end-to-end
# suite found this missing. Read access adds nothing to list/watch.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
{{- if .Values.devicePlugin.usage.interval }}
# A Warning Event GPUMemoryOverShare on a pod above its GPU memory share (deviceplugin/overshareactions.py),
# in the pod's namespace.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}
{{- if .Values.devicePlugin.usage.overShare.evict }}
# Opt-in over-share eviction through the Eviction API (PodDisruptionBudgets hold). RBAC cannot narrow it to
# the pods of the plugin's node; the plugin only evicts pods its node's watch shows.
- apiGroups: [""]
  resources: ["pods/eviction"]
  verbs: ["create"]
{{- end }}
{{- end }}

{{/* The unit label every part counts gpu-mem in (webhook/core/placement/annotations.py unit_mib): GiB, MiB or <N>MiB. */}}
{{- define "gpushare.memoryUnit" -}}
{{- if eq .Values.gpuMemory.unit "GiB" -}}GiB
{{- else if eq (int .Values.gpuMemory.mibPerDevice) 1 -}}MiB
{{- else -}}{{ int .Values.gpuMemory.mibPerDevice }}MiB
{{- end -}}
{{- end }}

{{/* The node agents' declared GPUs when simulation is on (checks.yaml refuses them otherwise): the same
GPUs on every node, or with simulation.nodes each node's own, read from the ConfigMap's file named after
the node (the kubelet expands $(NODE_NAME) from the container's env). */}}
{{- define "gpushare.simulatedGpus" -}}
{{- if and .Values.simulation.enabled .Values.simulation.nodes }}
- --inventory-file=/etc/gpushare/simulation/$(NODE_NAME).yaml
{{- else if .Values.simulation.enabled }}
- --fake-gpus={{ .Values.simulation.gpus }}
{{- end }}
{{- end }}

{{/* The ConfigMap's volume and mount for simulation.nodes; nothing otherwise. */}}
{{- define "gpushare.simulation.volumeMounts" -}}
{{- if and .Values.simulation.enabled .Values.simulation.nodes }}
- {name: simulation, mountPath: /etc/gpushare/simulation, readOnly: true}
{{- end }}
{{- end }}
{{- define "gpushare.simulation.volumes" -}}
{{- if and .Values.simulation.enabled .Values.simulation.nodes }}
- name: simulation
  configMap: {name: {{ include "gpushare.fullname" . }}-simulation}
{{- end }}
{{- end }}
