"""The label reference: every label gfd can emit, with its format, source and condition.

``docs/labels.md`` is generated from this table (``gfd docs``), and a test checks that
every label the labelers produce on every simulated machine is described here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelDoc:
    key: str
    """Key without ``nvidia.com/``; ``<R>`` is a resource (``gpu`` or ``mig-<profile>``),
    ``<model>`` a sanitised model name."""
    value: str
    example: str
    source: str
    when: str
    set: str
    """``compat`` (GFD's label, same rule) or ``extended`` (gfd's own)."""
    module: str
    """The labeler module that computes it (``gfd/labelers/<module>.py``)."""


_R = "<R>"
_MIG_ATTR = "nvmlDeviceGetAttributes on the MIG device"

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gfd.timestamp", value="Unix seconds", example="1724632719",
             source="clock, once at agent start", when="always, unless --no-timestamp",
             set="compat", module="timestamp"),
    LabelDoc(key="gpu.machine", value="sanitised DMI product name, `unknown` if unreadable",
             example="DGX-H100", source="--machine-type-file", when="GPUs present",
             set="compat", module="machine"),
    *(LabelDoc(key=f"cuda.driver.{p}", value="driver version part (text)", example=e,
               source="nvmlSystemGetDriverVersion", when="GPUs present (deprecated key)",
               set="compat", module="versions")
      for p, e in (("major", "580"), ("minor", "159"), ("rev", "04"))),
    *(LabelDoc(key=f"cuda.driver-version.{p}", value="driver version part (text)", example=e,
               source="nvmlSystemGetDriverVersion", when="GPUs present", set="compat",
               module="versions")
      for p, e in (("major", "580"), ("minor", "159"), ("revision", "04"),
                   ("full", "580.159.04"))),
    *(LabelDoc(key=f"cuda.runtime.{p}", value="integer", example=e,
               source="nvmlSystemGetCudaDriverVersion (newest CUDA the driver supports)",
               when="GPUs present (deprecated key)", set="compat", module="versions")
      for p, e in (("major", "13"), ("minor", "0"))),
    *(LabelDoc(key=f"cuda.runtime-version.{p}", value=v, example=e,
               source="nvmlSystemGetCudaDriverVersion (newest CUDA the driver supports)",
               when="GPUs present", set="compat", module="versions")
      for p, v, e in (("major", "integer", "13"), ("minor", "integer", "0"),
                      ("full", "`<major>.<minor>`", "13.0"))),
    LabelDoc(key="mig.capable", value="`true` / `false`", example="true",
             source="nvmlDeviceGetMigMode", when="GPUs present", set="compat", module="mig"),
    LabelDoc(key="mps.capable", value="`true` / `false`", example="false",
             source="config: sharing.mps", when="GPUs present", set="compat", module="mps"),
    LabelDoc(key="mig.strategy", value="`single` / `mixed`", example="mixed",
             source="--mig-strategy", when="GPUs present and strategy is not none",
             set="compat", module="mig"),
    LabelDoc(key="gpu.mode", value="`compute` / `graphics` / `unknown`", example="compute",
             source="sysfs PCI class of each GPU", when="GPUs present", set="compat",
             module="mode"),
    LabelDoc(key="gpu.clique", value="`<cluster UUID>.<clique id>`",
             example="7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1",
             source="nvmlDeviceGetGpuFabricInfo",
             when="fabric-attached GPUs agreeing on one clique", set="compat", module="clique"),
    LabelDoc(key="vgpu.present", value="`true` / `false`", example="false",
             source="sysfs PCI config space (vendor capability `VF`)",
             when="unless the config-space scan failed", set="compat", module="vgpu"),
    LabelDoc(key="vgpu.host-driver-version", value="text", example="550.54.16",
             source="vGPU capability record", when="a vGPU is present", set="compat",
             module="vgpu"),
    LabelDoc(key="vgpu.host-driver-branch", value="text", example="r550_40",
             source="vGPU capability record", when="a vGPU is present", set="compat",
             module="vgpu"),
    LabelDoc(key=f"{_R}.product",
             value="sanitised model, `-MIG-<profile>` for MIG, `-SHARED` when shared and not "
                   "renamed, `-MIG-INVALID` for an invalid single layout; at most 63 characters",
             example="NVIDIA-H100-80GB-HBM3", source="nvmlDeviceGetName",
             when="GPUs present (MIG: per profile)", set="compat", module="gpu / mig"),
    LabelDoc(key=f"{_R}.count", value="integer", example="8", source="device enumeration",
             when="GPUs present", set="compat", module="gpu / mig"),
    LabelDoc(key=f"{_R}.replicas", value="integer (0 for MIG-enabled full GPUs)", example="1",
             source="config: sharing", when="GPUs present", set="compat", module="resource"),
    LabelDoc(key=f"{_R}.sharing-strategy", value="`none` / `time-slicing` / `mps` (empty when "
             "INVALID)", example="none", source="config: sharing", when="GPUs present",
             set="compat", module="resource"),
    LabelDoc(key=f"{_R}.memory", value="MiB", example="81559",
             source="nvmlDeviceGetMemoryInfo (MIG: memorySizeMB)", when="memory known",
             set="compat", module="gpu / mig"),
    LabelDoc(key="gpu.family", value="architecture from compute capability", example="hopper",
             source="nvmlDeviceGetCudaComputeCapability", when="compute major is not 0",
             set="compat", module="family"),
    *(LabelDoc(key=f"gpu.compute.{p}", value="integer", example=e,
               source="nvmlDeviceGetCudaComputeCapability", when="compute major is not 0",
               set="compat", module="family")
      for p, e in (("major", "9"), ("minor", "0"))),
    *(LabelDoc(key=f"{_R}.{a}", value="integer", example=e, source=_MIG_ATTR,
               when="MIG devices under single (R = gpu) or mixed (R = mig-<profile>)",
               set="compat", module="mig")
      for a, e in (("multiprocessors", "14"), ("slices.gi", "1"), ("slices.ci", "1"),
                   ("engines.copy", "1"), ("engines.decoder", "0"), ("engines.encoder", "0"),
                   ("engines.jpeg", "0"), ("engines.ofa", "0"))),
    LabelDoc(key="gpu.heterogeneous", value="`true` / `false`", example="false",
             source="nvmlDeviceGetName", when="GPUs present", set="extended",
             module="inventory"),
    LabelDoc(key="gpu.product.<model>", value="GPU count of that model", example="8",
             source="nvmlDeviceGetName", when="one per model present", set="extended",
             module="inventory"),
    LabelDoc(key="gpu.memory.min", value="MiB", example="22731",
             source="nvmlDeviceGetMemoryInfo", when="GPUs present", set="extended",
             module="inventory"),
    LabelDoc(key=f"{_R}.memory.per-replica", value="MiB (memory // replicas)", example="3840",
             source="<R>.memory and config: sharing", when="replicas > 1", set="extended",
             module="resource"),
    LabelDoc(key="gpu.accelerator", value="lowercase slug, `nvidia-` prefixed",
             example="nvidia-tesla-t4", source="nvmlDeviceGetName (primary model)",
             when="GPUs present (also under --accelerator-label KEY)", set="extended",
             module="accelerator"),
    LabelDoc(key="gpu.timeslice", value="`default` / `short` / `medium` / `long`",
             example="default", source="nvidia-smi compute-policy --list",
             when="every GPU reports the same policy", set="extended", module="timeslice"),
    LabelDoc(key="gpu.compute-mode", value="`default` / `exclusive-process` / `prohibited`",
             example="default", source="nvmlDeviceGetComputeMode", when="all GPUs agree",
             set="extended", module="compute_mode"),
    LabelDoc(key="gpu.nvlink", value="`true` / `false`", example="true",
             source="nvmlDeviceGetNvLinkState", when="GPUs present", set="extended",
             module="nvlink"),
    LabelDoc(key="mig.enabled.count", value="integer", example="4",
             source="nvmlDeviceGetMigMode", when="MIG-capable GPUs present", set="extended",
             module="mig"),
    LabelDoc(key="mig.pending", value="`true`", example="true",
             source="nvmlDeviceGetMigMode (pending)", when="a MIG mode change awaits a GPU "
             "reset", set="extended", module="mig"),
    LabelDoc(key="gpu.unhealthy", value="integer", example="1",
             source="NVML per-GPU errors (GPU is lost, Unknown)", when="at least one",
             set="extended", module="unhealthy"),
)

# In a key pattern ``<R>`` stands for any resource and ``<model>`` for any model part, so a
# key the code builds from odd NVML names still finds its entry (and its set).
_PLACEHOLDERS = ((re.escape(_R), r"(?:gpu|mig-.+)"), (re.escape("<model>"), r".*"))


def _pattern(doc_key: str) -> str:
    text = re.escape(doc_key)
    for placeholder, pattern in _PLACEHOLDERS:
        text = text.replace(placeholder, pattern)
    return r"(?:nvidia\.com/" + text + ")"


_MATCHERS = tuple((re.compile(_pattern(doc.key), re.DOTALL), doc) for doc in LABELS)

EXTENDED_KEY: re.Pattern[str] = re.compile(
    "|".join(_pattern(doc.key) for doc in LABELS if doc.set == "extended"), re.DOTALL)
"""Matches (``fullmatch``) every full key of the extended set: one regular expression, so
the compat filter costs one match per label."""


def describe(key: str) -> LabelDoc | None:
    """The catalogue entry that documents a full label key, if any."""
    for pattern, doc in _MATCHERS:
        if pattern.fullmatch(key):
            return doc
    return None
