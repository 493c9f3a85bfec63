{{/*
Names, labels and the pieces of gfd's container that the DaemonSet, the nfd-sidecar
patch and the test pod share. What each piece is, and why, is said next to it.
*/}}

{{/*
Name of every object: the release name, with "-gfd" unless it already has it. At most
49 characters, so that the longest suffix (-node-labeller) keeps names within 63.
*/}}
{{- define "gfd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 49 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 49 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 49 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selects this release's pods. */}}
{{- define "gfd.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* On every object. */}}
{{- define "gfd.labels" -}}
{{ include "gfd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* On the test pod: the release's labels with a name of its own, so that no controller
of the chart selects it (the DaemonSet would adopt the pod and delete it as surplus). */}}
{{- define "gfd.testLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gfd.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The API sinks need a token and run as 65532; the file sink writes a host directory. */}}
{{- define "gfd.apiMode" -}}
{{- if has .Values.mode (list "nodefeature" "node") }}true{{ end -}}
{{- end -}}

{{- define "gfd.mig" -}}
{{- if ne .Values.migStrategy "none" }}true{{ end -}}
{{- end -}}

{{/* The ConfigMap holding the device-plugin config, or nothing when there is none. */}}
{{- define "gfd.configMapName" -}}
{{- if and .Values.config.content .Values.config.existingConfigMap -}}
{{- fail "config: set content or existingConfigMap, not both" -}}
{{- else if .Values.config.existingConfigMap -}}
{{- .Values.config.existingConfigMap -}}
{{- else if .Values.config.content -}}
{{- include "gfd.fullname" . }}-config
{{- end -}}
{{- end -}}

{{/*
Flags that change which labels gfd computes, in every gfd container that reads GPUs
(`gfd run` and `gfd labels` both take them): the MIG strategy and the config file.
*/}}
{{- define "gfd.discoveryArgs" -}}
{{- if include "gfd.mig" . }}
- --mig-strategy={{ .Values.migStrategy }}
{{- end }}
{{- if include "gfd.configMapName" . }}
- --config-file=/config/config.yaml
{{- end }}
{{- end -}}

{{/*
The NVIDIA container runtime's variables. Also baked into the image; repeated so a
rebuilt image still works. They ask the runtime to inject NVML and nvidia-smi for every
GPU without allocating any: gfd requests no nvidia.com/gpu. Where the NVIDIA Container
Toolkit has accept-nvidia-visible-devices-envvar-when-unprivileged=false, it ignores
this variable for unprivileged containers and NVML fails to start; such clusters must
hand gfd the devices another way (the toolkit's volume-mount device list, or CDI).
*/}}
{{- define "gfd.runtimeEnv" -}}
- name: NVIDIA_VISIBLE_DEVICES
  value: all
- name: NVIDIA_DRIVER_CAPABILITIES
  value: utility
# Without CAP_SYS_ADMIN (which only MIG grants) gfd cannot read all of PCI config space:
# it skips the vGPU scan and its vgpu.* labels (docs/privileges.md).
- name: GFD_NO_VGPU_LABELS
  value: {{ ternary "false" "true" (eq (include "gfd.mig" .) "true") | quote }}
{{- if include "gfd.mig" . }}
# The MIG "monitor" capability device, without which NVML cannot enumerate
# MIG devices it was not given (NVIDIA/gpu-feature-discovery#6).
- name: NVIDIA_MIG_MONITOR_DEVICES
  value: all
{{- end }}
{{- end -}}

{{/*
Container securityContext. Called with (dict "root" BOOL "seccomp" BOOL "ctx" $).

Why uid 0 where it is (root = the nfd-sidecar's feature file): there features.d is
nfd-worker's volume, and the chart adds no init container to NFD's pod to change its
owner; uid 0 writes there through the directory's owner bits alone, with every
capability dropped. The DaemonSet's file mode runs as 65532 like the API sinks: its init
container (gfd.featuresDirInit) gives features.d to group 65532, mode 1775.

Why uid 0 and SYS_ADMIN with MIG: the NVIDIA runtime grants the MIG monitor capability
only to a container holding CAP_SYS_ADMIN, and for a non-root user container runtimes
keep an added capability only in the bounding set (Kubernetes sets no ambient
capabilities), so the process would not hold it. SYS_ADMIN is close to full root on the
host; everything else stays locked down. It also lets gfd read full PCI config space, so
vgpu.* labels appear.

The user is always explicit: the image's default user is not relied on.
*/}}
{{- define "gfd.securityContext" -}}
{{- $mig := include "gfd.mig" .ctx -}}
{{- if or .root $mig }}
runAsNonRoot: false
runAsUser: 0
runAsGroup: 0
{{- else }}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
{{- end }}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
  {{- if $mig }}
  add: ["SYS_ADMIN"]
  {{- end }}
{{- if .seccomp }}
seccompProfile:
  type: RuntimeDefault
{{- end }}
{{- end -}}

{{/* Liveness and readiness on gfd's metrics port (named gfd-metrics). */}}
{{/*
The file mode's init container: features.d on the host belongs to root, mode 0755
(kubelet creates it so for DirectoryOrCreate), and fsGroup does not apply to hostPath.
Uid 0 with CHOWN alone gives it to group 65532 with mode 1775: gfd (uid 65532) may
create its file there, and the sticky bit keeps any file it does not own (NFD's, another
labeller's) from being removed or replaced by it. Files stay world-readable (0644), so
nfd-worker reads them as before. It also hands over what a gfd running as root left.
*/}}
{{- define "gfd.featuresDirInit" -}}
- name: features-d-owner
  image: {{ include "gfd.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command:
    - sh
    - -c
    - >-
      cd /etc/kubernetes/node-feature-discovery/features.d &&
      chgrp 65532 . && chmod 1775 . &&
      rm -f .gfd.lock .gfd-* &&
      if [ -f gfd ] && [ ! -L gfd ]; then chown 65532:65532 gfd; fi
  resources:
    requests:
      cpu: 10m
      memory: 16Mi
    limits:
      memory: 32Mi
  securityContext:
    runAsNonRoot: false
    runAsUser: 0
    runAsGroup: 0
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
      add: ["CHOWN"]
  volumeMounts:
    - name: features-d
      mountPath: /etc/kubernetes/node-feature-discovery/features.d
{{- end -}}

{{- define "gfd.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: gfd-metrics
  {{- toYaml .Values.livenessProbe | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: gfd-metrics
  {{- toYaml .Values.readinessProbe | nindent 2 }}
{{- end -}}

{{/*
Volume for the device-plugin config. Called with (dict "name" VOLUME "ctx" $). Mounted
as a directory, not with subPath, so the kubelet's updates reach gfd, which re-reads the
file when its content changes; hence no checksum annotation restarting the pods.
*/}}
{{- define "gfd.configVolume" -}}
{{- with include "gfd.configMapName" .ctx }}
- name: {{ $.name }}
  configMap:
    name: {{ . }}
    items:
      - key: {{ $.ctx.Values.config.key }}
        path: config.yaml
{{- end }}
{{- end -}}

{{- define "gfd.configMount" -}}
{{- if include "gfd.configMapName" .ctx }}
- name: {{ .name }}
  mountPath: /config
  readOnly: true
{{- end }}
{{- end -}}

{{/* gfd fleet --serve's pods: a name of their own (not the agent's: `gfd fleet --check`
never takes one for the gfd that keeps a node's labels, no agent selector picks them). */}}
{{- define "gfd.fleetSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-fleet
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gfd.fleetLabels" -}}
{{ include "gfd.fleetSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}
