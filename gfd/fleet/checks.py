"""What disagrees (``gfd fleet --check``): nodes whose GPU labels say one thing and what the
scheduler sees says another, GPU nodes without labels, labels no running gfd keeps, and
claims holding devices no slice publishes any more. Each finding names the node, what
disagrees and where to look.

The labels' meaning is gfd's and GFD's (docs/labels.md): under the device plugin, ``<R>.count``
units of resource ``<R>`` (MIG devices under ``--mig-strategy single``), each replicated
``<R>.replicas`` times, full GPUs outside MIG being ``gpu.devices.full`` under ``mixed``; under
the DRA driver, ``gpu.count`` GPUs of the primary model ``gpu.product``."""

from __future__ import annotations

from dataclasses import dataclass

from gfd import dra
from gfd.facts.naming import sanitise
from gfd.fleet import pools
from gfd.fleet.count import Counted
from gfd.fleet.kinds import SHARED, label_prefix
from gfd.fleet.model import Fleet, Node, count_label, gpu_resource

P = "nvidia.com/"
CHECKS = ("device-plugin-units", "mig-units", "dra-slices", "no-slices", "no-device-plugin",
          "unlabelled", "no-agent", "orphan-claim", "incomplete-pool", "invalid-pool",
          "quantity")
"""Every check a finding can name (docs/fleet.md)."""
GFD_KEYS = (f"{P}gfd.timestamp", f"{P}gpu.count", f"{P}gpu.product", f"{P}gpu.present")
"""Any of these: the node carries GPU labels from gfd or GFD."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    node: str
    check: str
    message: str
    look_at: str

    def to_api(self) -> dict[str, str]:
        return {"node": self.node, "check": self.check, "message": self.message,
                "lookAt": self.look_at}


def _int(labels: dict[str, str], key: str) -> int | None:
    return count_label(labels.get(P + key))


def _expected_units(node: Node, resource: str) -> tuple[int, str] | None:
    """The units of ``resource`` the node's labels promise, and the labels that say so."""
    labels = node.labels
    prefix = label_prefix(resource)
    strategy = labels.get(f"{P}mig.strategy", "none")
    replicas = _int(labels, f"{prefix}.replicas")
    if prefix == "gpu" and strategy == "mixed":
        count, said = _int(labels, "gpu.devices.full"), "gpu.devices.full"
    else:
        count, said = _int(labels, f"{prefix}.count"), f"{prefix}.count"
    if prefix == "gpu" and labels.get(f"{P}gpu.heterogeneous") == "true" and strategy != "mixed":
        # gpu.count is the primary model's: every model's count is the node's
        models = [n for k, v in labels.items()
                  if k.startswith(f"{P}gpu.product.") and (n := count_label(v)) is not None]
        count, said = (sum(models), "gpu.product.<model>") if models else (None, said)
    if count is None:
        return None
    if prefix == "gpu" and replicas == 0:
        return None  # MIG-enabled GPUs: gpu.replicas=0 cannot tell what the plugin shares
    if replicas is None:
        return count, f"{said}={count}"
    return count * replicas, f"{said}={count}, {prefix}.replicas={replicas}"


def _gpu_units(node: Node) -> bool:
    """The node has device-plugin GPU resources (allocatable or capacity above 0)."""
    return any(v > 0 for r, v in (*node.allocatable.items(), *node.capacity.items())
               if gpu_resource(r))


def _dra_labelled(node: Node) -> bool:
    """gfd's labels under ``--resource-manager dra``: ``gpu.present`` and ``gpu.count``, and
    none of the device plugin's (``gpu.replicas``)."""
    labels = node.labels
    return (labels.get(f"{P}gpu.present") == "true" and f"{P}gpu.count" in labels
            and f"{P}gpu.replicas" not in labels)


def _unregistered(node: Node) -> list[Finding]:
    """A node marked as a GPU node whose GPUs neither the device plugin nor the DRA driver
    offers: no GPU allocatable, no ResourceSlice."""
    said = ", ".join(f"{k.removeprefix(P)}={node.labels[k]}" for k in GFD_KEYS[1:]
                     if k in node.labels)
    if _dra_labelled(node):
        return [Finding(
            node=node.name, check="no-slices",
            message=f"labelled for the DRA driver ({said}), and no ResourceSlice publishes "
                    "its GPUs: no claim can be allocated there",
            look_at=f"the DRA driver's kubelet plugin on {node.name} (its pod and log; "
                    f"`kubectl get resourceslices --field-selector spec.nodeName={node.name}`)")]
    return [Finding(
        node=node.name, check="no-device-plugin",
        message=f"labelled a GPU node ({said}), and no GPU is allocatable and no "
                "ResourceSlice is published: the device plugin has not registered "
                "nvidia.com/gpu with the kubelet (nor does a DRA driver publish the GPUs)",
        look_at=f"the device plugin's pod on {node.name} and its log (did it register at "
                "/var/lib/kubelet/device-plugins/kubelet.sock?), `kubectl describe node "
                f"{node.name}` (Allocatable)")]


def _plugin(node: Node, slices_here: bool) -> list[Finding]:
    out: list[Finding] = []
    if slices_here:
        return out
    if not _gpu_units(node):
        return _unregistered(node) if node.labels.get(f"{P}gpu.present") == "true" or \
            _int(node.labels, "gpu.count") else out
    names = {r for r in (*node.allocatable, *node.capacity) if gpu_resource(r)}
    for prefix_key in sorted(k for k in node.labels if k.endswith(".count")):
        prefix = prefix_key.removeprefix(P).removesuffix(".count")
        if prefix == "gpu" or prefix.startswith("mig-"):
            shared = f"{P}{prefix}{SHARED}"
            names.add(shared if shared in names else f"{P}{prefix}")
    for resource in sorted(names):
        if not gpu_resource(resource):
            continue
        expected = _expected_units(node, resource)
        if expected is None:
            continue
        units, said = expected
        have = node.allocatable.get(resource, 0)
        if units == have:
            continue
        check = "mig-units" if label_prefix(resource).startswith("mig-") else "device-plugin-units"
        if have < units:
            cap = node.capacity.get(resource, 0)
            why = (f"capacity is {cap}: the device plugin marks {cap - have} unhealthy"
                   if cap > have else "the device plugin advertises fewer (not running, or "
                   "not registered with the kubelet?)")
            look = (f"the device plugin's pod on {node.name} and its log, `nvidia-smi` there "
                    "(an unhealthy GPU or a lost one?)")
        else:
            why = "the device plugin advertises more than the labels describe (stale labels?)"
            look = (f"gfd's pod on {node.name} (is it running, with the device plugin's "
                    "config?) and `gfd diff` there")
        out.append(Finding(node=node.name, check=check,
                           message=f"labels say {units} {resource} ({said}), allocatable is "
                                   f"{have}: {why}", look_at=look))
    return out


def _dra(node: Node, pools_here: list[pools.Pool]) -> list[Finding]:
    """The DRA driver's pools of the node (``pools_here``) against its labels."""
    labels = node.labels
    gpus: set[str] = set()
    products: set[str] = set()
    for pool in pools_here:
        for device in pool.devices:
            kind = device.attributes.get(dra.TYPE)
            uuid = str(device.attributes.get(dra.UUID) or "")
            parent = str(device.attributes.get(dra.PARENT_UUID) or "")
            if kind == "gpu":
                gpus.add(uuid or device.name)
            elif kind == "mig" and parent:
                gpus.add(parent)
            products.add(sanitise(str(device.attributes.get(dra.PRODUCT_NAME, ""))))
    out: list[Finding] = []
    if not gpus:
        return out
    count = _int(labels, "gpu.count")
    heterogeneous = labels.get(f"{P}gpu.heterogeneous") == "true"
    look = (f"the DRA driver's kubelet plugin on {node.name} and gfd's pod there (its "
            "--resource-manager, `gfd devices` beside `kubectl get resourceslices "
            f"--field-selector spec.nodeName={node.name} -o yaml`)")
    if count is not None and not heterogeneous and count != len(gpus):
        out.append(Finding(node=node.name, check="dra-slices",
                           message=f"labels say gpu.count={count}, the ResourceSlices publish "
                                   f"{len(gpus)} GPUs", look_at=look))
    product = labels.get(f"{P}gpu.product", "")
    if product and not heterogeneous and products and product not in products:
        out.append(Finding(node=node.name, check="dra-slices",
                           message=f"labels say gpu.product={product}, the ResourceSlices "
                                   f"publish {', '.join(sorted(products))}", look_at=look))
    return out


def check(fleet: Fleet, counted: Counted) -> list[Finding]:
    """Every disagreement found, by node."""
    dra_pools: dict[str, list[pools.Pool]] = {}
    for pool in counted.gathered.values():
        if pool.driver == dra.DRIVER:
            dra_pools.setdefault(pool.node, []).append(pool)
    dra_nodes = set(dra_pools)
    agents = {p.node: p for p in fleet.pods if p.agent and p.node}
    ready_agents = {p.node for p in fleet.pods if p.agent and p.node and p.agent_ready}
    out: list[Finding] = []
    for name in sorted(fleet.nodes):
        node = fleet.nodes[name]
        labelled = any(k in node.labels for k in GFD_KEYS)
        has_gpus = _gpu_units(node)
        if (has_gpus or name in dra_nodes) and not labelled:
            out.append(Finding(
                node=name, check="unlabelled",
                message="GPUs (" + (", ".join(f"{k}={v}" for k, v in sorted(
                    node.capacity.items())) or "DRA ResourceSlices") + ") and no GPU labels",
                look_at=f"whether gfd runs on {name} (its DaemonSet's nodeSelector, "
                        "tolerations) and its log"))
            continue
        if labelled and name not in ready_agents and _expects_agent(fleet):
            pod = agents.get(name)
            state = f"its pod {pod.namespace}/{pod.name} is not Ready" if pod else \
                "no gfd or GFD pod runs there"
            out.append(Finding(
                node=name, check="no-agent",
                message=f"GPU labels that nothing keeps current: {state}",
                look_at=f"the gfd DaemonSet's pods (`kubectl get pods -A -o wide "
                        f"--field-selector spec.nodeName={name}`), its nodeSelector and "
                        "tolerations"))
        if labelled:
            out += _plugin(node, name in dra_nodes)
            if name in dra_nodes:
                out += _dra(node, dra_pools[name])
    out += _pools(counted)
    out += _quantities(fleet)
    published = {pools.key(d) for p in counted.gathered.values() for d in p.devices}
    holders = [(d, c) for d, c in counted.held.devices.items()] + [
        (d, c) for d, who in counted.held.sharers.items() for c in who]
    for device, claim in sorted(holders):
        if device not in published and device[0] == dra.DRIVER:
            where = next((c.node for c in fleet.claims.values()
                          if f"{c.namespace}/{c.name}" == claim), "")
            out.append(Finding(
                node=where or device[1], check="orphan-claim",
                message=f"claim {claim} holds device {device[2]} of pool {device[1]}, which "
                        "no ResourceSlice publishes any more",
                look_at=f"the claim's pods (`kubectl describe resourceclaim -n "
                        f"{claim.replace('/', ' ')}`) and the DRA driver's plugin on that node"))
    return out


def _pools(counted: Counted) -> list[Finding]:
    """The DRA driver's pools the allocator skips: incomplete or invalid."""
    out = []
    for pool in sorted(counted.gathered.values(), key=lambda p: (p.node, p.name)):
        if pool.driver != dra.DRIVER:
            continue
        look = (f"the DRA driver's kubelet plugin on {pool.node} and its slices (`kubectl get "
                f"resourceslices --field-selector spec.nodeName={pool.node} -o yaml`)")
        if not pool.complete:
            out.append(Finding(
                node=pool.node, check="incomplete-pool",
                message=f"pool {pool.name} generation {pool.generation} has {pool.slices} of "
                        f"its {pool.expected} ResourceSlices: the scheduler allocates none of "
                        f"its {len(pool.devices)} devices until every slice is there",
                look_at=look))
        elif pool.invalid:
            out.append(Finding(
                node=pool.node, check="invalid-pool",
                message=f"pool {pool.name} is invalid ({pool.invalid}): the scheduler "
                        f"allocates none of its {len(pool.devices)} devices",
                look_at=look))
    return out


def _quantities(fleet: Fleet) -> list[Finding]:
    """Node resources whose values the scheduler cannot hold, left out of the counts."""
    return [Finding(node=name, check="quantity",
                    message=f"{resource} is {value!r}: {why}; left out of the counts",
                    look_at=f"whatever sets {name}'s status (the kubelet, a device plugin: "
                            f"`kubectl get node {name} -o yaml`)")
            for name, node in sorted(fleet.nodes.items())
            for resource, value, why in node.unreadable]


def _expects_agent(fleet: Fleet) -> bool:
    """Agent pods are only looked for when pods were read (a dump without pods, or a LIST of
    pods that was refused, says nothing about them)."""
    return not any(line.startswith("list pods") for line in fleet.incomplete)
