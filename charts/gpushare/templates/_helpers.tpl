{{/* Names, labels and shared fragments of the gpushare chart. */}}

{{- define "gpushare.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release-wide prefix; parts append -webhook, -extender, ... so keep it short enough (40). */}}
{{- define "gpushare.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpushare.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object; call with (dict "root" $ "component" "webhook"). */}}
{{- define "gpushare.labels" -}}
helm.sh/chart: {{ include "gpushare.chart" .root }}
{{ include "gpushare.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: gpushare
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gpushare.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpushare.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpushare.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Object names, one place each. */}}
{{- define "gpushare.webhook.name" -}}{{ include "gpushare.fullname" . }}-webhook{{- end }}
{{- define "gpushare.webhook.tlsSecret" -}}{{ include "gpushare.fullname" . }}-webhook-tls{{- end }}
{{- define "gpushare.webhook.mutatingName" -}}{{ include "gpushare.fullname" . }}-mutating{{- end }}
{{- define "gpushare.webhook.validatingName" -}}{{ include "gpushare.fullname" . }}-validating{{- end }}
{{- define "gpushare.certgen.name" -}}{{ include "gpushare.fullname" . }}-certgen{{- end }}
{{- define "gpushare.extender.name" -}}{{ include "gpushare.fullname" . }}-extender{{- end }}
{{- define "gpushare.scheduler.name" -}}{{ include "gpushare.fullname" . }}-scheduler{{- end }}
{{- define "gpushare.devicePlugin.name" -}}{{ include "gpushare.fullname" . }}-device-plugin{{- end }}
{{- define "gpushare.tests.name" -}}{{ include "gpushare.fullname" . }}-test{{- end }}

{{/* The webhook runs in the cluster (a Deployment behind a Service), not at webhook.url. */}}
{{- define "gpushare.webhook.inCluster" -}}
{{- if and .Values.webhook.enabled (not .Values.webhook.url) }}true{{ end }}
{{- end }}

{{/* webhook.url: only provided certificates fit (no Service to issue for); caCrt is the caBundle. */}}
{{- define "gpushare.webhook.checkUrl" -}}
{{- if .Values.webhook.url }}
{{- if ne .Values.certificates.mode "provided" }}
{{- fail "webhook.url needs certificates.mode=provided: give certificates.provided.caCrt, the CA of the URL's certificate" }}
{{- end }}
{{- if not .Values.certificates.provided.caCrt }}
{{- fail "webhook.url needs certificates.provided.caCrt, the CA of the URL's certificate (PEM)" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The DNS names the API server uses for the webhook Service (it dials <svc>.<ns>.svc). */}}
{{- define "gpushare.webhook.dnsNames" -}}
{{- $svc := include "gpushare.webhook.name" . -}}
{{- $ns := .Release.Namespace -}}
- {{ $svc }}
- {{ $svc }}.{{ $ns }}
- {{ $svc }}.{{ $ns }}.svc
- {{ $svc }}.{{ $ns }}.svc.cluster.local
{{- end }}

{{/* The extender's base URL as kube-scheduler calls it. */}}
{{- define "gpushare.extender.urlPrefix" -}}
{{- if .Values.extender.urlPrefix }}
{{- if not (hasPrefix "https://" .Values.extender.urlPrefix) }}
{{- fail "extender.urlPrefix must be an https:// URL: the extender serves only HTTPS and authenticates kube-scheduler by its client certificate" }}
{{- end }}
{{- .Values.extender.urlPrefix }}
{{- else }}
{{- printf "https://%s.%s.svc:%d/gpushare-scheduler" (include "gpushare.extender.name" .) .Release.Namespace (int .Values.extender.port) }}
{{- end }}
{{- end }}

{{/*
caBundle for the webhook configurations (base64 PEM). provided: from values. certManager: none,
cainjector fills it. selfManaged: none (the hooks patch it in, Helm never owns it), marked on the
configurations by CA_BUNDLE_BY_HOOKS. A rendered caBundle is put back by `helm rollback` as that revision
rendered it: the first revision renders before the hook made a CA, so a rollback to it removed caBundle,
and GPU pods were refused until the post-rollback hook, after --wait (docs/operations.md). A release
installed by 0.1.0, whose configurations lack the mark, keeps its caBundle rendered from what is
installed: its last manifest holds one, and a manifest without it would make Helm remove it.
*/}}
{{- define "gpushare.webhook.caBundle" -}}
{{- $mode := .Values.certificates.mode -}}
{{- if eq $mode "provided" -}}
{{- .Values.certificates.provided.caCrt | b64enc -}}
{{- else if and (eq $mode "selfManaged") (not (include "gpushare.webhook.caBundleByHooks" .)) -}}
{{- $cfg := lookup "admissionregistration.k8s.io/v1" "ValidatingWebhookConfiguration" "" (include "gpushare.webhook.validatingName" .) -}}
{{- $installed := "" -}}
{{- range ($cfg.webhooks | default list) -}}
{{- if and (not $installed) .clientConfig.caBundle -}}{{- $installed = .clientConfig.caBundle -}}{{- end -}}
{{- end -}}
{{- $installed -}}
{{- end -}}
{{- end }}

{{/* "true" when the hooks alone write caBundle: selfManaged, and no configuration installed without the
mark (a fresh install, or one made by this chart since the mark exists). */}}
{{- define "gpushare.webhook.caBundleByHooks" -}}
{{- if eq .Values.certificates.mode "selfManaged" -}}
{{- $cfg := lookup "admissionregistration.k8s.io/v1" "ValidatingWebhookConfiguration" "" (include "gpushare.webhook.validatingName" .) -}}
{{- if or (not $cfg) (hasKey ($cfg.metadata.annotations | default dict) "gpushare.aliyun.com/ca-bundle-by-hooks") -}}true{{- end -}}
{{- end -}}
{{- end }}

{{/* cert-manager's cainjector annotation on the webhook configurations. */}}
{{- define "gpushare.webhook.annotations" -}}
{{- if eq .Values.certificates.mode "certManager" -}}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "gpushare.webhook.name" . }}
{{- else if include "gpushare.webhook.caBundleByHooks" . -}}
annotations:
  # caBundle is the ensure-certs hooks' alone: the chart renders none (_helpers.tpl).
  gpushare.aliyun.com/ca-bundle-by-hooks: "true"
{{- end -}}
{{- end }}

{{/* clientConfig of a webhook; call with (list $ "/path"). */}}
{{- define "gpushare.webhook.clientConfig" -}}
{{- $root := index . 0 -}}
{{- if $root.Values.webhook.url }}
url: {{ printf "%s%s" $root.Values.webhook.url (index . 1) | quote }}
{{- else }}
service:
  namespace: {{ $root.Release.Namespace }}
  name: {{ include "gpushare.webhook.name" $root }}
  path: {{ index . 1 }}
  port: 443
{{- end }}
{{- $ca := include "gpushare.webhook.caBundle" $root }}
{{- if $ca }}
caBundle: {{ $ca }}
{{- end }}
{{- end }}

{{/* Fields every webhook of both configurations shares. */}}
{{- define "gpushare.webhook.common" -}}
failurePolicy: {{ .Values.webhook.failurePolicy }}
{{ include "gpushare.webhook.settings" . }}
{{- end }}

{{/* Every webhook's settings but its failurePolicy. */}}
{{- define "gpushare.webhook.settings" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
matchPolicy: Equivalent
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- range (uniq (concat (list "kube-system" .Release.Namespace) .Values.webhook.excludeNamespaces)) }}
        - {{ . | quote }}
        {{- end }}
    # A namespace label: pod authors cannot opt their own pods out.
    - key: {{ .Values.webhook.optOutLabel }}
      operator: NotIn
      values: ["true"]
{{- end }}

{{/*
CEL: true when a container of the pod spec at `path` asks for a GPU resource in limits or requests.
Call with (list $ "object.spec"). Each step of the path is guarded with has(), because templates may
omit it (ReplicationController.spec.template is optional); map keys hold "/" and ".", so they are tested
by iterating the map (contracts §2.2).
*/}}
{{- define "gpushare.cel.asksForGpu" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- $g := (include "gpushare.webhook.config" $root | fromYaml).resources -}}
{{- include "gpushare.cel.checkNames" (concat (list $g.memory $g.count) $g.wholeDevice $g.wholeDevicePrefixes) -}}
{{- $names := list -}}
{{- range (concat (list $g.memory $g.count) $g.wholeDevice) }}{{ $names = append $names (printf "'%s'" .) }}{{ end -}}
{{- $key := printf "k in [%s]" (join ", " $names) -}}
{{- range $g.wholeDevicePrefixes }}{{ $key = printf "%s || k.startsWith('%s')" $key . }}{{ end -}}
{{- $container := printf "has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, %s)) || (has(c.resources.requests) && c.resources.requests.exists(k, %s)))" $key $key -}}
{{- $guards := list -}}
{{- $parts := splitList "." $path -}}
{{- range $i, $_ := $parts }}{{ if gt $i 0 }}{{ $guards = append $guards (printf "has(%s)" (join "." (slice $parts 0 (add1 $i)))) }}{{ end }}{{ end -}}
{{- $guards = append $guards (printf "(has(%s.containers) && %s.containers.exists(c, %s) || has(%s.initContainers) && %s.initContainers.exists(c, %s))" $path $path $container $path $path $container) -}}
{{- join " && " $guards -}}
{{- end }}

{{/* Names that go into CEL string literals (webhook.extraConfig can set them past the schema): a quote or a
backslash would break the expression, and the API server would refuse the whole configuration. */}}
{{- define "gpushare.cel.checkNames" -}}
{{- range . }}
{{- if not (and (kindIs "string" .) (regexMatch "^[A-Za-z0-9][-A-Za-z0-9_./]*$" .)) }}
{{- fail (printf "%v is not a resource, label or annotation name (letters, digits, - _ . /): check gpuResources, webhook.isolation and webhook.extraConfig" .) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Always rendered: without them every pod in the cluster would wait on (and, with failurePolicy Fail,
depend on) the webhook. */}}
{{- define "gpushare.matchConditions" -}}
matchConditions:
  - name: asks-for-gpu
    expression: {{ include "gpushare.cel.asksForGpu" (list (index . 0) (index . 1)) | quote }}
{{- if gt (len .) 2 }}
  # An UPDATE that leaves what the rules read as it was cannot bring a new problem (the webhook only
  # denies those): it is not sent, so controllers scaling GPU workloads, the extender placing and the
  # device plugin marking GPU pods never wait on the webhook, nor fail with it (failurePolicy Fail).
  - name: update-changes-what-the-rules-read
    expression: {{ printf "request.operation != 'UPDATE' || %s" (include "gpushare.cel.changed" (list (index . 0) (index . 2))) | quote }}
{{- end }}
{{- end }}

{{/*
CEL: what the rules read differs between object and oldObject. (list $ "pod"): the pod's spec, its
gpu-count label, its isolation and compute-percent annotations, as the webhook's config file names them
(pod metadata changes beside those, such as the extender's placement annotations, cannot change a verdict). (list $ "spec.template") and the like:
that part of the object, the pod template whole.
*/}}
{{- define "gpushare.cel.changed" -}}
{{- $root := index . 0 -}}
{{- $what := index . 1 -}}
{{- if eq $what "pod" -}}
{{- $cfg := include "gpushare.webhook.config" $root | fromYaml -}}
{{- include "gpushare.cel.checkNames" (list $cfg.resources.count $cfg.isolation.annotationKey) -}}
{{- $keys := list (list "labels" $cfg.resources.count) (list "annotations" $cfg.isolation.annotationKey) (list "annotations" "gpushare.aliyun.com/compute-percent") -}}
{{- $diffs := list "object.spec != oldObject.spec" -}}
{{- range $keys -}}
{{- $field := index . 0 -}}{{- $key := index . 1 -}}
{{- /* [value] or [] when absent: an empty value is not the same as none (the rules refuse ""). */ -}}
{{- $new := printf "(has(object.metadata.%s) && '%s' in object.metadata.%s ? [object.metadata.%s['%s']] : [])" $field $key $field $field $key -}}
{{- $old := printf "(has(oldObject.metadata.%s) && '%s' in oldObject.metadata.%s ? [oldObject.metadata.%s['%s']] : [])" $field $key $field $field $key -}}
{{- $diffs = append $diffs (printf "%s != %s" $new $old) -}}
{{- end -}}
{{- join " || " $diffs -}}
{{- else -}}
{{- $parts := splitList "." $what -}}
{{- $guards := list -}}
{{- range $i, $_ := $parts }}{{ $guards = append $guards (printf "has(oldObject.%s)" (join "." (slice $parts 0 (add1 $i)))) }}{{ end -}}
{{- printf "!(%s) || object.%s != oldObject.%s" (join " && " $guards) $what $what -}}
{{- end -}}
{{- end }}

{{/* The pod security context of the non-root parts. */}}
{{- define "gpushare.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext }}
{{- end }}
{{- define "gpushare.securityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}

{{/* Hook annotations of the self-managed certificate Job and its RBAC (weights order RBAC first). */}}
{{/* The certgen identities: the hook run on install/upgrade (its objects are deleted after it succeeds) and,
with certificates.selfManaged.renewSchedule, the standing one the renewal CronJob runs as. */}}
{{- define "gpushare.certgen.flavors" -}}
- {name: {{ include "gpushare.certgen.name" . | quote }}, hook: true}
{{- if .Values.certificates.selfManaged.renewSchedule }}
- {name: {{ printf "%s-renew" (include "gpushare.certgen.name" .) | quote }}, hook: false}
{{- end }}
{{- end }}

{{/* The ensure-certs pod of the hook Jobs and of the renewal CronJob: (dict "root" $ "serviceAccount" NAME
"createOnly" BOOL); createOnly for the pre-install/pre-upgrade Job. */}}
{{- define "gpushare.certgen.podSpec" -}}
{{- $root := .root }}
{{- $c := $root.Values.certificates.selfManaged -}}
restartPolicy: OnFailure
serviceAccountName: {{ .serviceAccount }}
automountServiceAccountToken: true
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- include "gpushare.podSecurityContext" $root | nindent 2 }}
containers:
  {{- if $root.Values.webhook.enabled }}
  - name: ensure-certs
    image: {{ include "gpushare.image" $root }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    args:
      - ensure-certs
      - --namespace={{ $root.Release.Namespace }}
      - --secret={{ include "gpushare.webhook.tlsSecret" $root }}
      {{- range (include "gpushare.webhook.dnsNames" $root | fromYamlArray) }}
      - --service-dns={{ . }}
      {{- end }}
      - --mutating-webhook-configuration={{ include "gpushare.webhook.mutatingName" $root }}
      - --validating-webhook-configuration={{ include "gpushare.webhook.validatingName" $root }}
      - --ca-valid-days={{ $c.caValidityDays }}
      - --valid-days={{ $c.validityDays }}
      - --renew-before-days={{ $c.renewBeforeDays }}
      - --log-format={{ $root.Values.logFormat }}
      {{- if .createOnly }}
      - --create-only
      {{- end }}
    resources:
      {{- toYaml $c.resources | nindent 6 }}
    securityContext:
      {{- include "gpushare.securityContext" $root | nindent 6 }}
  {{- end }}
  {{- if $root.Values.extender.enabled }}
  {{- /* Always whole: the extender's CA stays across renewals and lives in no caBundle Helm renders, so
  renewing before the Deployments roll is what they need (a Secret lacking the client pair would keep
  them from starting, and helm --wait from reaching the post-upgrade hook). */}}
  {{- include "gpushare.extender.certgenContainer" $root | nindent 2 }}
  {{- end }}
{{- with $root.Values.webhook.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.webhook.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "gpushare.certgen.hookAnnotations" -}}
helm.sh/hook: {{ .hook | default "pre-install,pre-upgrade,pre-rollback,post-install,post-upgrade,post-rollback" }}
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/* The namespace of the helm test's dry run. */}}
{{- define "gpushare.tests.namespace" -}}
{{- default (printf "%s-test" (include "gpushare.fullname" .)) .Values.tests.namespace }}
{{- end }}

{{/* A PodDisruptionBudget only where it leaves a pod to evict: with one replica (or minAvailable at the
replica count) `kubectl drain` would wait forever. (dict "part" NAME "values" .Values.<part> "on" BOOL) */}}
{{- define "gpushare.pdb.wanted" -}}
{{- if and .on .values.podDisruptionBudget.enabled (gt (int .values.replicas) 1) }}true{{ end }}
{{- end }}

{{- define "gpushare.checkPdb" -}}
{{- if include "gpushare.pdb.wanted" . }}
{{- $min := .values.podDisruptionBudget.minAvailable }}
{{- $blocks := false }}
{{- if kindIs "string" $min }}
{{- $blocks = ge (int (trimSuffix "%" $min)) 100 }}
{{- else }}
{{- $blocks = ge (int $min) (int .values.replicas) }}
{{- end }}
{{- if $blocks }}
{{- fail (printf "%s.podDisruptionBudget.minAvailable=%v with %s.replicas=%v would never let a pod be evicted (kubectl drain waits forever): keep it below the replica count" .part $min .part .values.replicas) }}
{{- end }}
{{- end }}
{{- end }}
