{{/*
The gfd container as a strategic-merge patch on NFD's worker DaemonSet, for mode
nfd-sidecar (nfd-sidecar.yaml wraps it in a kustomize Component). Same content as
manifests/overlays/nfd-sidecar/gfd-sidecar-patch.yaml.
*/}}
{{- define "gfd.nfdSidecarPatch" -}}
# Strategic-merge patch on NFD's worker DaemonSet: adds the gfd container (merged by
# name, so NFD's own container is untouched) and the volumes only gfd uses. The
# features.d directory is NFD's own features-d volume, shared: nfd-worker mounts it
# read-only, gfd read-write. No labels here: they would land on NFD's objects.
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .Values.nfdSidecar.daemonSet }}
  namespace: {{ .Values.nfdSidecar.namespace | default .Release.Namespace }}
spec:
  template:
    metadata:
      annotations:
        # The merge puts gfd first in the container list, which would make it what
        # `kubectl logs` and `kubectl exec` pick by default: keep that NFD's container.
        kubectl.kubernetes.io/default-container: {{ .Values.nfdSidecar.defaultContainer }}
        {{- with .Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: gfd
          image: {{ include "gfd.image" . }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          command: ["gfd", "run"]
          args:
            - --metrics-port={{ .Values.nfdSidecar.metricsPort }}
            # nfd-worker runs on every node, GPU or not. Without a GPU (no NVML) gfd would
            # otherwise exit and crash-loop, keeping NFD's pod unready; with false it keeps
            # running, retries NVML every cycle, and on a node without GPUs publishes only
            # the labels that need no NVML (nvidia.com/gfd.timestamp and
            # nvidia.com/vgpu.present=false; add --no-timestamp=true to drop the first).
            - --fail-on-init-error=false
            {{- with include "gfd.discoveryArgs" . }}
            {{- . | trim | nindent 12 }}
            {{- end }}
            # The user's flags last, so they override the ones above.
            {{- with .Values.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          env:
            # The feature-file sink (the default), at the default path:
            # /etc/kubernetes/node-feature-discovery/features.d/gfd.
            - name: GFD_SINK
              value: file
            - name: NODE_NAME
              valueFrom:
                fieldRef:
                  fieldPath: spec.nodeName
            {{- include "gfd.runtimeEnv" . | trim | nindent 12 }}
            {{- with .Values.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: gfd-metrics
              containerPort: {{ .Values.nfdSidecar.metricsPort }}
              protocol: TCP
          # A wedged cycle restarts only this container, never nfd-worker.
          {{- include "gfd.probes" . | nindent 10 }}
          resources:
            {{- toYaml .Values.resources | nindent 12 }}
          # Uid 0 for the feature file (see gfd.securityContext in _helpers.tpl). Seccomp
          # is set here because NFD's pod-level securityContext is NFD's to choose.
          securityContext:
            {{- include "gfd.securityContext" (dict "root" true "seccomp" true "ctx" .) | trim | nindent 12 }}
          volumeMounts:
            - name: features-d
              mountPath: /etc/kubernetes/node-feature-discovery/features.d
            # Host sysfs, read-only: DMI product name, PCI class, PCI config space.
            - name: gfd-host-sys
              mountPath: /sys
              readOnly: true
            - name: gfd-tmp
              mountPath: /tmp
            # nfd-worker's pod mounts its ServiceAccount token (NFD needs it); gfd in file
            # mode needs none. An empty volume at the token's path keeps NFD's credentials
            # out of this container (the token is added only to containers that have no
            # mount there).
            - name: gfd-no-api-token
              mountPath: /var/run/secrets/kubernetes.io/serviceaccount
              readOnly: true
            {{- with include "gfd.configMount" (dict "name" "gfd-config" "ctx" .) }}
            {{- . | trim | nindent 12 }}
            {{- end }}
      volumes:
        - name: gfd-host-sys
          hostPath:
            path: /sys
            type: Directory
        - name: gfd-tmp
          emptyDir:
            sizeLimit: 16Mi
        - name: gfd-no-api-token
          emptyDir:
            sizeLimit: 1Mi
        {{- with include "gfd.configVolume" (dict "name" "gfd-config" "ctx" .) }}
        {{- . | trim | nindent 8 }}
        {{- end }}
{{- end -}}
