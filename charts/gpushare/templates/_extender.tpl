{{/* The extender's command line and RBAC rules; flags follow webhook/cli/serve/extender.py. */}}

{{- /* "true" when the extender serves HTTP/2 (extender.http2; auto: when the chart's own CA issues its
certificates, so every client certificate that CA signs is kube-scheduler's). */}}
{{- define "gpushare.extender.http2" -}}
{{- $v := .Values.extender.http2 -}}
{{- if eq (toString $v) "auto" -}}
{{- if or (eq .Values.certificates.mode "selfManaged") (and (eq .Values.certificates.mode "certManager") (not .Values.certificates.certManager.issuerRef)) }}true{{ end -}}
{{- else if $v }}true{{ end -}}
{{- end }}

{{- define "gpushare.extender.args" -}}
- extender
- "--host=::"
- --port={{ .Values.extender.port }}
- --memory-unit={{ include "gpushare.memoryUnit" . }}
- --whole-card-resource={{ .Values.gpuResources.wholeCard }}
{{- /* Filter keeps only the best-fitting nodes, so kube-scheduler's own scores (which know nothing of
GPUs) cannot undo the GPU-level best fit; docs/extender.md, "How placement survives kube-scheduler". */}}
{{- /* hasKey: `--set extender.bestFitFilter=null` removes the key, and then the default (on) applies. */}}
- --{{ if and (hasKey .Values.extender "bestFitFilter") (not .Values.extender.bestFitFilter) }}no-{{ end }}best-fit-filter
{{- $dir := include "gpushare.extender.tlsDir" . }}
{{- /* HTTPS, and only callers with the Secret's client certificate (kube-scheduler's tlsConfig) get
filter, prioritize, bind and inspect. */}}
- --tls-cert={{ $dir }}/tls.crt
- --tls-key={{ $dir }}/tls.key
- --client-ca={{ $dir }}/ca.crt
{{- if include "gpushare.extender.http2" . }}
{{- /* One multiplexed connection from kube-scheduler; the certificate is required at the handshake and
the CA is the check (its own, under auto), so the probes get a port of their own. */}}
- --http2
- --health-port={{ .Values.extender.healthPort }}
{{- else }}
{{- /* Only that certificate's name: a CA that also signs others' certificates (a shared cert-manager
issuer, a provided corporate CA) must not let them bind pods. */}}
- --client-name={{ .Values.extender.tls.clientName }}
{{- end }}
{{- if .Values.extender.leaderElection.enabled }}
- --leader-elect
- --lease-name={{ .Values.extender.leaderElection.leaseName }}
- --lease-namespace={{ .Release.Namespace }}
{{- /* Followers forward bind to the leader at the URL it publishes on the Lease; the kubelet expands
$(POD_IP) from the container's env. The leader's certificate names the Service, not the pod IP. */}}
- --advertise-url=https://$(POD_IP):{{ .Values.extender.port }}
- --forward-ca={{ $dir }}/ca.crt
- --forward-server-name={{ include "gpushare.extender.serverName" . }}
- --forward-cert={{ $dir }}/client.crt
- --forward-key={{ $dir }}/client.key
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
  enableHTTPS: true
  {{- $dir := .Values.extender.tls.schedulerCertDir }}
  tlsConfig:
    serverName: {{ include "gpushare.extender.serverName" . }}
    caFile: {{ $dir }}/ca.crt
    certFile: {{ $dir }}/client.crt
    keyFile: {{ $dir }}/client.key
  nodeCacheCapable: true
  httpTimeout: {{ .Values.extender.httpTimeout }}
  ignorable: false
  managedResources:
    - name: {{ .Values.gpuResources.memory }}
      ignoredByScheduler: false
    {{- /* Whole cards too: on shared nodes our plugin serves them and the extender keeps them off GPUs
    that hold shares; on default nodes it passes them through. The scheduler still counts them. */}}
    - name: {{ .Values.gpuResources.wholeCard }}
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
{{- /* Every feasible node reaches the extender's filter, so its best fit is the cluster's best fit; the
default (adaptive, 50% at 100 nodes falling to 5%) would show it only the first nodes found. */}}
percentageOfNodesToScore: {{ .Values.scheduler.percentageOfNodesToScore }}
profiles:
  - schedulerName: {{ .Values.scheduler.schedulerName }}
extenders:
  {{- include "gpushare.extender.schedulerEntry" . | nindent 2 }}
{{- end }}

{{/* Where the extender container reads its certificates (the projected volume below). */}}
{{- define "gpushare.extender.tlsDir" -}}/etc/gpushare/extender-tls{{- end }}

{{/* The name the extender's serving certificate holds and kube-scheduler checks (tlsConfig.serverName),
whatever host urlPrefix dials (a ClusterIP, a NodePort on 127.0.0.1). */}}
{{- define "gpushare.extender.serverName" -}}
{{ include "gpushare.extender.name" . }}.{{ .Release.Namespace }}.svc
{{- end }}

{{- define "gpushare.extender.dnsNames" -}}
{{- $svc := include "gpushare.extender.name" . -}}
- {{ $svc }}
- {{ $svc }}.{{ .Release.Namespace }}
- {{ $svc }}.{{ .Release.Namespace }}.svc
- {{ $svc }}.{{ .Release.Namespace }}.svc.cluster.local
{{- end }}

{{/* The extender's Secret: serving pair, client pair and CA (selfManaged: also ca.key, never mounted).
cert-manager issues the client pair into a second Secret. */}}
{{- define "gpushare.extender.tlsSecret" -}}{{ include "gpushare.extender.name" . }}-tls{{- end }}
{{- define "gpushare.extender.clientSecret" -}}{{ include "gpushare.extender.name" . }}-client-tls{{- end }}

{{/* A projected volume of the extender's certificates; (dict "root" $ "for" "extender"|"scheduler").
The extender gets tls.crt, tls.key, ca.crt, client.crt, client.key; kube-scheduler only ca.crt,
client.crt, client.key. Same file names in every certificates.mode. */}}
{{- define "gpushare.extender.tlsVolume" -}}
{{- $root := .root -}}
{{- $server := eq .for "extender" -}}
projected:
  defaultMode: 0440
  sources:
    {{- if eq $root.Values.certificates.mode "certManager" }}
    {{- if $server }}
    - secret:
        name: {{ include "gpushare.extender.tlsSecret" $root }}
        items: [{key: tls.crt, path: tls.crt}, {key: tls.key, path: tls.key}, {key: ca.crt, path: ca.crt}]
    - secret:
        name: {{ include "gpushare.extender.clientSecret" $root }}
        items: [{key: tls.crt, path: client.crt}, {key: tls.key, path: client.key}]
    {{- else }}
    - secret:
        name: {{ include "gpushare.extender.clientSecret" $root }}
        items: [{key: ca.crt, path: ca.crt}, {key: tls.crt, path: client.crt}, {key: tls.key, path: client.key}]
    {{- end }}
    {{- else }}
    - secret:
        name: {{ include "gpushare.extender.tlsSecret" $root }}
        items:
          {{- if $server }}
          - {key: tls.crt, path: tls.crt}
          - {key: tls.key, path: tls.key}
          {{- end }}
          - {key: ca.crt, path: ca.crt}
          - {key: client.crt, path: client.crt}
          - {key: client.key, path: client.key}
    {{- end }}
{{- end }}

{{/* The ensure-certs container that keeps the extender's Secret (selfManaged). */}}
{{- define "gpushare.extender.certgenContainer" -}}
{{- $root := . -}}
{{- $c := $root.Values.certificates.selfManaged -}}
- name: ensure-extender-certs
  image: {{ include "gpushare.image" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args:
    - ensure-certs
    - --namespace={{ $root.Release.Namespace }}
    - --secret={{ include "gpushare.extender.tlsSecret" $root }}
    {{- range (include "gpushare.extender.dnsNames" $root | fromYamlArray) }}
    - --service-dns={{ . }}
    {{- end }}
    - --client-name={{ $root.Values.extender.tls.clientName }}
    - --ca-valid-days={{ $c.caValidityDays }}
    - --valid-days={{ $c.validityDays }}
    - --renew-before-days={{ $c.renewBeforeDays }}
    - --log-format={{ $root.Values.logFormat }}
  resources:
    {{- toYaml $c.resources | nindent 4 }}
  securityContext:
    {{- include "gpushare.securityContext" $root | nindent 4 }}
{{- end }}
