{{/*
Names are fixed, not derived from the release: Metacontroller names the
finalizer it puts on every EtcdCluster after the CompositeController, and the
kustomize install (manifests/) uses the same names, so either install can
take over from the other.
*/}}

{{/* The namespace of the hook's objects. */}}
{{- define "etcd-hook.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end -}}

{{/* The labels of every object of the hook's own, and its Pods' selector. */}}
{{- define "etcd-hook.labels" -}}
app.kubernetes.io/name: etcd-hook
{{- end -}}

{{/* The hook's image: <repository>@<digest>, or <repository>:<tag>. */}}
{{- define "etcd-hook.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/*
The host:port Metacontroller calls over HTTPS: what the endpointConfigs
entry matches, as written in the webhook URLs.
*/}}
{{- define "etcd-hook.tlsHost" -}}
{{- printf "etcd-hook.%s.svc:443" (include "etcd-hook.namespace" .) -}}
{{- end -}}

{{/* Where the webhook URLs start: plain HTTP, or HTTPS with tls.enabled. */}}
{{- define "etcd-hook.hookURL" -}}
{{- if .Values.tls.enabled -}}
{{- printf "https://%s" (include "etcd-hook.tlsHost" .) -}}
{{- else -}}
{{- printf "http://etcd-hook.%s" (include "etcd-hook.namespace" .) -}}
{{- end -}}
{{- end -}}

{{/*
The endpointConfigs of a CompositeController with tls.enabled: one entry for
the hook's host, which every webhook of the controller (customize, sync,
finalize) uses, verified against ca.crt of the hook's Secret and nothing else.
*/}}
{{- define "etcd-hook.endpointConfigs" -}}
{{- if .Values.tls.enabled }}
endpointConfigs:
- host: {{ include "etcd-hook.tlsHost" . }}
  caBundle:
    secretRef:
      name: {{ .Values.tls.secretName }}
      namespace: {{ include "etcd-hook.namespace" . }}
      key: ca.crt
{{- end }}
{{- end -}}

{{/*
Whether the monitoring objects are rendered: asked for, and the cluster
serves the Prometheus Operator's API. They are plain objects, never
Metacontroller children: a child kind without its CRD would stop the
controller from starting.
*/}}
{{- define "etcd-hook.monitoring" -}}
{{- if and .Values.monitoring.enabled (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") -}}
true
{{- end -}}
{{- end -}}

{{/* Values that the schema cannot refuse on its own. */}}
{{- define "etcd-hook.validate" -}}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.enabled) -}}
{{- fail "tls.certManager.enabled needs tls.enabled: cert-manager issues the certificate the hook serves HTTPS with" -}}
{{- end -}}
{{- range .Values.extraArgs -}}
{{- if regexMatch "^--(addr|agent-image|tls-cert-file|tls-key-file|tls-addr|peers|peer-address)(=|$)" . -}}
{{- fail (printf "extraArgs: %s is set by the chart (image sets --agent-image, tls.enabled the TLS flags, sharding.enabled --peers and --peer-address); a second one would disagree with it" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
