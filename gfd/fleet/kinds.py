"""What kind of GPU unit a resource is: the device plugin's resources named from the node's
gfd (or GFD) labels, the DRA driver's devices from their attributes.

A kind is what a pod can ask for and get any unit of: the model (``gpu.product`` without
``-SHARED`` or ``-MIG-<profile>``), the memory of one unit (a MIG slice's, an MPS replica's
share), the MIG profile, the sharing and its replicas, the resource a pod requests and who
hands it out. On a node with GPUs of several models, ``nvidia.com/gpu`` may be any of them:
its model lists them all (``A+B``), its memory is the smallest."""

from __future__ import annotations

from dataclasses import dataclass

from gfd import dra
from gfd.facts.naming import sanitise
from gfd.fleet.model import Device, Node, count_label

P = "nvidia.com/"
DEVICE_PLUGIN = "device-plugin"
DRA = "dra"
SHARED = ".shared"


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Kind:
    manager: str
    model: str
    """"" when the node has no GPU labels."""
    memory: int | None
    """MiB of one unit; None when not known."""
    mig_profile: str
    sharing: str
    replicas: int
    resource: str

    def to_api(self) -> dict[str, object]:
        return {"model": self.model, "memory": self.memory, "migProfile": self.mig_profile,
                "sharing": self.sharing, "replicas": self.replicas, "resource": self.resource,
                "manager": self.manager}


_int = count_label


def label_prefix(resource: str) -> str:
    """``nvidia.com/mig-1g.10gb.shared`` -> ``mig-1g.10gb``: the ``<R>`` of gfd's and GFD's
    ``<R>.count``, ``<R>.replicas``... labels."""
    return resource.removeprefix(P).removesuffix(SHARED)


def _model(labels: dict[str, str], prefix: str) -> tuple[str, str]:
    """The model and the MIG profile a ``<R>.product`` names (``-MIG-<profile>`` is a MIG
    device's under ``--mig-strategy single`` or ``mixed``)."""
    product = labels.get(f"{P}{prefix}.product", "")
    if product.upper().endswith("-SHARED"):
        product = product[: -len("-SHARED")]
    model, _, profile = product.partition("-MIG-")
    if prefix == "gpu" and labels.get(f"{P}gpu.heterogeneous") == "true":
        models = sorted(k.removeprefix(f"{P}gpu.product.") for k in labels
                        if k.startswith(f"{P}gpu.product."))
        model = "+".join(models) or model
    return model, "" if profile == "INVALID" else profile


def plugin_kind(node: Node, resource: str) -> Kind:
    """The kind of the device plugin's ``resource`` on ``node``, from its labels."""
    labels = node.labels
    prefix = label_prefix(resource)
    model, profile = _model(labels, prefix)
    if prefix.startswith("mig-"):
        profile = prefix.removeprefix("mig-")
    sharing = labels.get(f"{P}{prefix}.sharing-strategy") or "none"
    replicas = max(1, _int(labels.get(f"{P}{prefix}.replicas")) or 1)
    memory = _int(labels.get(f"{P}{prefix}.memory"))
    if prefix == "gpu" and labels.get(f"{P}gpu.heterogeneous") == "true":
        memory = _int(labels.get(f"{P}gpu.memory.min")) or memory
    if sharing == "mps" and memory is not None:  # each replica: its own GPU's / replicas
        per = _int(labels.get(f"{P}{prefix}.memory.per-replica"))
        memory = memory // replicas if per is None or memory // replicas < per else per
    if not model and f"{P}{prefix}.sharing-strategy" not in labels:
        sharing = "unknown"  # no labels: what the device plugin shares is not known
    return Kind(manager=DEVICE_PLUGIN, model=model, memory=memory, mig_profile=profile,
                sharing=sharing, replicas=replicas, resource=resource)


def device_kind(device: Device, resource: str | None = None) -> Kind:
    """The kind of a DRA driver's device: its productName (sanitised, as ``gpu.product``
    spells it), memory capacity, MIG profile and the DeviceClass ``resource`` a claim names to
    get it (by default the driver chart's class of its type)."""
    attrs = device.attributes
    kind = str(attrs.get(dra.TYPE, "gpu" if device.driver == dra.DRIVER else ""))
    memory = device.capacity.get(dra.MEMORY)
    if memory is None and kind == "vfio":
        memory = device.capacity.get(dra.ADDRESSABLE_MEMORY)
    profile = str(attrs.get(dra.PROFILE, "")).replace("+", ".")
    if resource is None:
        try:
            resource = dra.device_class(kind) if device.driver == dra.DRIVER else device.driver
        except StopIteration:
            resource = f"{device.driver} ({kind})"
    return Kind(manager=DRA, model=sanitise(str(attrs.get(dra.PRODUCT_NAME, ""))),
                memory=memory // 2**20 if memory is not None else None, mig_profile=profile,
                sharing="shared" if device.allow_multiple else "none", replicas=1,
                resource=resource)
