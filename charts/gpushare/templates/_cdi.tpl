{{/* How GPUs reach containers, shared by the device plugin and the DRA driver (docs/cdi.md): their flags,
the read-only mounts of the node's CDI spec folders, the NVML access of the agents themselves. */}}
{{- define "gpushare.cdi.args" -}}
- --device-list-strategy={{ .Values.cdi.deviceListStrategy }}
- --cdi-spec-dirs={{ join "," .Values.cdi.specDirs }}
- --cdi-kind={{ .Values.cdi.kind }}
{{- end }}

{{/* The spec folders, read-only; `skip` is a folder the part already mounts read-write (the DRA driver's
own CDI folder). */}}
{{- define "gpushare.cdi.volumeMounts" -}}
{{- $skip := .skip | default "" }}
{{- range $i, $dir := .root.Values.cdi.specDirs }}
{{- if ne $dir $skip }}
- {name: cdi-spec-{{ $i }}, mountPath: {{ $dir }}, readOnly: true}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpushare.cdi.volumes" -}}
{{- $skip := .skip | default "" }}
{{- range $i, $dir := .root.Values.cdi.specDirs }}
{{- if ne $dir $skip }}
- name: cdi-spec-{{ $i }}
  hostPath:
    path: {{ $dir }}
    type: DirectoryOrCreate
{{- end }}
{{- end }}
{{- end }}

{{/* The pod annotation by which the NVIDIA Container Toolkit's NRI plugin (GPU Operator 25.10+ with
cdi.nriPluginEnabled) injects the management CDI device, NVML and every GPU, into one container. */}}
{{- define "gpushare.cdi.managementAnnotation" -}}
{{- with .root.Values.cdi.managementDevice }}
nvidia.cdi.k8s.io/container.{{ $.container }}: {{ . | quote }}
{{- end }}
{{- end }}

{{/* The node agent's RuntimeClass: "auto" is `nvidia` when the cluster has that RuntimeClass when the
chart is installed or upgraded (the GPU Operator makes it unless its NRI plugin is on), else none. */}}
{{- define "gpushare.cdi.runtimeClassName" -}}
{{- if eq .name "auto" }}
{{- if lookup "node.k8s.io/v1" "RuntimeClass" "" "nvidia" }}nvidia{{ end }}
{{- else }}{{ .name }}
{{- end }}
{{- end }}
