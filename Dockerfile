# gfd container image.
#
#   docker build -t ghcr.io/gfd-project/gfd:0.1.0 .
#
# No NVIDIA library is baked in: the NVIDIA container runtime (or CDI) injects
# libnvidia-ml.so.1 and nvidia-smi from the host driver at container start, driven by
# NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES below. Baking a copy in would tie
# the image to one driver version.
#
# The base image is pinned to an exact Python patch release and Debian release; both
# stages use the same one so the wheel is built by the interpreter that runs it. Pin
# it further by digest (python:3.11.13-slim-bookworm@sha256:...) in your own build if
# your policy requires it. BASE exists for CI, which cannot pull from a registry and
# builds on a Debian bookworm image it assembles itself (.ci/image, README "The image");
# every published image is built from the default.
ARG BASE=python:3.11.13-slim-bookworm

# ---- build: turn the source tree into one wheel (gfd only, no dependencies) ----------
FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# .dockerignore admits only what the wheel needs: pyproject.toml, README.md, gfd/ (and the
# lock, for the runtime stage).
COPY pyproject.toml README.md ./
COPY gfd/ ./gfd/
RUN pip wheel --no-cache-dir --no-deps -w /dist .

# ---- runtime: the wheel and its locked dependencies, nothing else ---------------------
FROM ${BASE}
# PYTHONDONTWRITEBYTECODE: the pod runs with readOnlyRootFilesystem, so never try to
#   write __pycache__ (pip already compiled the bytecode at install time).
# PYTHONUNBUFFERED: log lines reach `kubectl logs` at once.
# NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=compute,utility,
#   NVIDIA_DISABLE_REQUIRE=true: what GFD's image asks of the NVIDIA container runtime,
#   so this image is a drop-in where GFD's runs: every GPU, for monitoring only (gfd
#   requests no nvidia.com/gpu resource, so it never takes a GPU from a workload);
#   `utility` injects NVML and nvidia-smi, `compute` libcuda (the Tegra back end, for
#   Jetson/IGX, reads the GPU through it). Our own manifests narrow it to `utility`.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_DISABLE_REQUIRE=true
# Bind-mount the build stage's /dist and the lock rather than COPY them, so neither
# becomes a layer of the image (BuildKit, the default builder since Docker 23).
# requirements.lock (.ci/lock writes it from pyproject.toml) pins every dependency by
# version and sha256: pip installs exactly those wheels (--require-hashes, --no-deps: no
# resolution at build time), then gfd's own wheel without dependencies, and `pip check`
# fails the build if the set is not consistent.
# /usr/bin/gpu-feature-discovery: the path GFD's static manifests run; the GPU Operator and
# the device plugin's chart run `gpu-feature-discovery` from PATH (/usr/local/bin). It
# accepts GFD's command line and defaults and names its process gpu-feature-discovery, so
# GFD's config-manager sidecar finds it to send SIGHUP.
RUN --mount=type=bind,from=build,source=/dist,target=/dist \
    --mount=type=bind,source=requirements.lock,target=/tmp/requirements.lock \
    pip install --no-cache-dir --require-hashes --no-deps -r /tmp/requirements.lock \
    && pip install --no-cache-dir --no-deps /dist/*.whl \
    && pip check \
    && ln -s /usr/local/bin/gpu-feature-discovery /usr/bin/gpu-feature-discovery
# The default user is root, on purpose: the GPU Operator runs GFD's image with its own
# default user (privileged, and no ClusterPolicy field sets a user), writes the feature
# file into the host's root-owned features.d (0755), and reads the vGPU labels from PCI
# config space, which only root reads in full (an unprivileged reader gets 64 of 4096
# bytes, and every vgpu.* label would be missing). Where gfd is deployed by its own
# manifests or chart, the pod sets the least privilege each mode needs: uid 65532 for the
# API sinks, uid 0 with every capability dropped for the feature file.
# hadolint ignore=DL3002
USER 0:0
# No HEALTHCHECK: Kubernetes ignores it; the manifests probe /healthz and /readyz on
# --metrics-port instead.
ENTRYPOINT ["gfd", "run"]
