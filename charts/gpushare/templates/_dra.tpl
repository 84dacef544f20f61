{{/* The DRA driver's names, command line and RBAC; flags follow webhook/cli/serve/dra_driver.py. */}}
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
{{- include "gpushare.cdi.args" . | nindent 0 }}
{{- include "gpushare.simulatedGpus" . }}
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

{{/*
CEL: true when the claim spec at `path` (object.spec of a ResourceClaim, object.spec.spec of a template)
has a request, or a firstAvailable subrequest, naming one of our DeviceClasses. Call with (list $ "object.spec").
*/}}
{{- define "gpushare.cel.asksForOurClass" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- $c := $root.Values.dra.deviceClasses -}}
{{- $classes := printf "['%s', '%s']" $c.share $c.wholeGpu -}}
{{- $guards := list -}}
{{- $parts := splitList "." (printf "%s.devices.requests" $path) -}}
{{- range $i, $_ := $parts }}{{ if gt $i 0 }}{{ $guards = append $guards (printf "has(%s)" (join "." (slice $parts 0 (add1 $i)))) }}{{ end }}{{ end -}}
{{- $guards = append $guards (printf "%s.devices.requests.exists(r, has(r.exactly) && has(r.exactly.deviceClassName) && r.exactly.deviceClassName in %s || has(r.firstAvailable) && r.firstAvailable.exists(s, has(s.deviceClassName) && s.deviceClassName in %s))" $path $classes $classes) -}}
{{- join " && " $guards -}}
{{- end }}
