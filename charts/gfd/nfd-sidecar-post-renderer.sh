#!/bin/sh
# Helm post-renderer for NFD's release: adds gfd as a container of NFD's worker pods.
#
#   helm template gfd charts/gfd --namespace node-feature-discovery --set mode=nfd-sidecar \
#     --set nfdSidecar.daemonSet=<NFD's worker DaemonSet> > gfd-sidecar.yaml
#   GFD_SIDECAR="$PWD/gfd-sidecar.yaml" helm upgrade --install <release> \
#     nfd/node-feature-discovery --namespace node-feature-discovery \
#     --post-renderer charts/gfd/nfd-sidecar-post-renderer.sh
#
# Helm pipes NFD's rendered manifests to stdin and installs what this prints: the same
# manifests with gfd's kustomize Component applied (a strategic merge on the worker
# DaemonSet, as in manifests/overlays/nfd-sidecar). Needs kustomize or kubectl on PATH.
set -eu
component=${GFD_SIDECAR:?set GFD_SIDECAR to the output of helm template charts/gfd --set mode=nfd-sidecar}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/gfd"
cp "$component" "$work/gfd/kustomization.yaml"
cat > "$work/nfd.yaml"
printf 'resources: [nfd.yaml]\ncomponents: [gfd]\n' > "$work/kustomization.yaml"
if command -v kustomize > /dev/null 2>&1; then
  kustomize build "$work"
else
  kubectl kustomize "$work"
fi
