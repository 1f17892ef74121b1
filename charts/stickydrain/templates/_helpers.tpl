{{/*
Labels on every object: the one the kustomize install sets, and Helm's own.
*/}}
{{- define "stickydrain.labels" -}}
app.kubernetes.io/part-of: stickydrain
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The webhook's admission port (default 9443 also for `helm upgrade
--reuse-values` from a chart without webhook.securePort).
*/}}
{{- define "stickydrain.webhookPort" -}}
{{- .Values.webhook.securePort | default 9443 -}}
{{- end }}

{{/*
A component's pod template metadata: (list $ "webhook"|"controller").
*/}}
{{- define "stickydrain.podMetadata" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $c := index $root.Values $name -}}
labels:
  app.kubernetes.io/name: stickydrain-{{ $name }}
  {{- with $root.Values.commonLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- with $c.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $c.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
A component's flags from the chart's logLevel and its extraArgs, as args
lines: (list $ "webhook"|"controller").
*/}}
{{- define "stickydrain.extraArgs" -}}
{{- $root := index . 0 -}}
{{- $c := index $root.Values (index . 1) -}}
{{- with $root.Values.logLevel }}
- --zap-log-level={{ . }}
{{- end }}
{{- range $c.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
An image reference from {repository, tag, digest}: repository:tag,
repository:tag@digest, or repository@digest when tag is "-".
Called with (list $ .Values.image).
*/}}
{{- define "stickydrain.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $tag := $img.tag | default $root.Chart.AppVersion -}}
{{- $ref := $img.repository -}}
{{- if ne $tag "-" }}{{ $ref = printf "%s:%s" $ref $tag }}{{ end -}}
{{- if $img.digest }}{{ $ref = printf "%s@%s" $ref $img.digest }}{{ end -}}
{{- $ref -}}
{{- end }}

{{/*
Whether the ServiceMonitors (and the scraper's account) are rendered.
*/}}
{{- define "stickydrain.serviceMonitors" -}}
{{- $m := .Values.monitoring.serviceMonitors -}}
{{- if eq (toString $m) "auto" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" }}true{{ end -}}
{{- else if $m -}}
true
{{- end -}}
{{- end }}

{{/*
The namespaces no webhook of the install ever sees.
*/}}
{{- define "stickydrain.excludedNamespaces" -}}
- key: kubernetes.io/metadata.name
  operator: NotIn
  values:
  {{- range (concat (list "kube-system" .Release.Namespace) .Values.webhook.excludedNamespaces | uniq) }}
  - {{ . }}
  {{- end }}
{{- end }}

{{/*
The hardening both Deployments share.
*/}}
{{- define "stickydrain.podSecurityContext" -}}
runAsGroup: 65532
runAsNonRoot: true
runAsUser: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "stickydrain.containerSecurityContext" -}}
allowPrivilegeEscalation: false
capabilities:
  drop:
  - ALL
readOnlyRootFilesystem: true
{{- end }}

{{/*
Scheduling of one component: (list $ "webhook"|"controller").
*/}}
{{- define "stickydrain.scheduling" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $c := index $root.Values $name -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
- name: {{ . }}
{{- end }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity }}
affinity:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- $pc := $root.Values.priorityClass | default dict }}
{{- $class := $root.Values.priorityClassName }}
{{- /* priorityClass.name: the class created, or (the previous chart's way)
an existing one named with create: false. */}}
{{- if and (not $class) $pc.name (or $pc.create (ne $pc.name "stickydrain-critical")) }}
{{- $class = $pc.name }}
{{- end }}
{{- with $class }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
{{- include "stickydrain.podSecurityContext" $root | nindent 2 }}
serviceAccountName: stickydrain-{{ $name }}
topologySpreadConstraints:
{{- range list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
- labelSelector:
    matchLabels:
      app.kubernetes.io/name: stickydrain-{{ $name }}
  maxSkew: 1
  topologyKey: {{ . }}
  whenUnsatisfiable: ScheduleAnyway
{{- end }}
{{- end }}

{{/*
The leader-election Role and RoleBinding of one component.
*/}}
{{- define "stickydrain.leaderElection" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: stickydrain-{{ $name }}-leader-election
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "stickydrain.labels" $root | nindent 4 }}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: stickydrain-{{ $name }}-leader-election
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "stickydrain.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: stickydrain-{{ $name }}-leader-election
subjects:
- kind: ServiceAccount
  name: stickydrain-{{ $name }}
  namespace: {{ $root.Release.Namespace }}
{{- end }}

{{/*
The PodDisruptionBudget of one component.
*/}}
{{- define "stickydrain.pdb" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $c := index $root.Values $name -}}
{{- /* Every key defaulted: `helm upgrade --reuse-values` from a chart
without it gives none. */ -}}
{{- $pdb := $c.podDisruptionBudget | default dict -}}
{{- if and (ne $pdb.enabled false) (gt (int $c.replicas) 1) -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: stickydrain-{{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "stickydrain.labels" $root | nindent 4 }}
spec:
  {{- if ne $pdb.minAvailable nil }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $pdb.maxUnavailable | default 1 }}
  {{- end }}
  unhealthyPodEvictionPolicy: {{ $pdb.unhealthyPodEvictionPolicy | default "AlwaysAllow" }}
  selector:
    matchLabels:
      app.kubernetes.io/name: stickydrain-{{ $name }}
{{- end }}
{{- end }}

{{/*
The controller kinds whose pods a Namespace opt-in reaches fail-closed, and
the others a Namespace's stickydrain.io/owner-kinds may name (JSON lists).
*/}}
{{- define "stickydrain.ownerKinds" -}}
{{- .Values.webhook.namespaceOptInOwnerKinds | default (list "ReplicaSet" "StatefulSet") | toJson -}}
{{- end }}
{{- define "stickydrain.otherOwnerKinds" -}}
{{- $kinds := include "stickydrain.ownerKinds" . | fromJsonArray -}}
{{- $other := list -}}
{{- range list "ReplicaSet" "StatefulSet" "DaemonSet" "Job" "ReplicationController" -}}
{{- if not (has . $kinds) }}{{ $other = append $other . }}{{ end -}}
{{- end -}}
{{- $other | toJson -}}
{{- end }}

{{/*
matchCondition expressions: the pod's controller is of one of the kinds
(a list); the pod opts itself in.
*/}}
{{- define "stickydrain.ownedBy" -}}
has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller && r.kind in [{{ range $i, $k := . }}{{ if $i }}, {{ end }}'{{ $k }}'{{ end }}])
{{- end }}
{{- define "stickydrain.labelledIn" -}}
has(object.metadata.labels) && 'stickydrain.io/drain' in object.metadata.labels && object.metadata.labels['stickydrain.io/drain'] == 'enabled'
{{- end }}
