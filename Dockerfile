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
# your policy requires it.

# ---- build: turn the source tree into one wheel (gfd only, no dependencies) ----------
FROM python:3.11.13-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# .dockerignore admits only what the wheel needs: pyproject.toml, README.md, gfd/.
COPY pyproject.toml README.md ./
COPY gfd/ ./gfd/
RUN pip wheel --no-cache-dir --no-deps -w /dist .

# ---- runtime: the wheel and its declared dependencies, nothing else -------------------
FROM python:3.11.13-slim-bookworm
# PYTHONDONTWRITEBYTECODE: the pod runs with readOnlyRootFilesystem, so never try to
#   write __pycache__ (pip already compiled the bytecode at install time).
# PYTHONUNBUFFERED: log lines reach `kubectl logs` at once.
# NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility: ask the NVIDIA
#   container runtime for every GPU, for monitoring only; `utility` injects NVML and
#   nvidia-smi, not the CUDA compute libraries gfd does not use. gfd requests no
#   nvidia.com/gpu resource, so it never takes a GPU away from a workload.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
# Bind-mount the build stage's /dist rather than COPY it, so the wheel itself never
# becomes a layer of the image (BuildKit, the default builder since Docker 23).
RUN --mount=type=bind,from=build,source=/dist,target=/dist \
    pip install --no-cache-dir /dist/*.whl
# Numeric, so Kubernetes' runAsNonRoot can verify it without an /etc/passwd entry.
# 65532 is the conventional "nonroot" id of distroless images.
USER 65532:65532
# No HEALTHCHECK: Kubernetes ignores it; the manifests probe /healthz and /readyz on
# --metrics-port instead.
ENTRYPOINT ["gfd", "run"]
