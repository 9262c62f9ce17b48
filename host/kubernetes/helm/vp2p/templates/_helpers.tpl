{{/* The service account's user name, as admission sees it. */}}
{{- define "vp2p.serviceAccountUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:vp2p-dra-driver
{{- end -}}
