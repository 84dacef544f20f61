{{/*
The webhook's --config file. Keys follow webhook/admission/settings.py; the resource names and isolation
keys come from the same values the matchConditions use, so both agree on what a GPU is.
*/}}
{{- define "gpushare.webhook.config" -}}
{{- $g := .Values.gpuResources -}}
{{- $i := .Values.webhook.isolation -}}
{{- $cfg := dict
  "resources" (dict "memory" $g.memory "count" $g.count "wholeDevice" $g.wholeDevice "wholeDevicePrefixes" $g.wholeDevicePrefixes)
  "isolation" (dict "labelKey" $i.labelKey "annotationKey" $i.annotationKey "envName" $i.envName "default" $i.default)
  "excludedNamespaces" (uniq (concat (list "kube-system" .Release.Namespace) .Values.webhook.excludeNamespaces))
  "memoryUnit" (include "gpushare.memoryUnit" .)
  "minShareMiB" (int .Values.webhook.minShareMiB)
  "dra" (dict "shareClass" .Values.dra.deviceClasses.share "wholeGpuClass" .Values.dra.deviceClasses.wholeGpu "memoryStep" (include "gpushare.dra.memoryStep" .) "maxMemory" .Values.dra.maxClaimMemory)
-}}
{{- if eq .Values.scheduler.mode "second" }}
{{- $_ := set $cfg "schedulerName" .Values.scheduler.schedulerName }}
{{- end }}
{{- toYaml (mergeOverwrite $cfg .Values.webhook.extraConfig) }}
{{- end }}

{{/* The step the DRA driver rounds a claim's memory up to (its --memory-unit and --mib-per-device). */}}
{{- define "gpushare.dra.memoryStep" -}}
{{- if eq .Values.gpuMemory.unit "MiB" -}}{{ int .Values.dra.mibStep }}Mi{{- else -}}1Gi{{- end -}}
{{- end }}
