"""Hypothesis strategies shared by the property tests: snapshots, label options, JSON values.

Every property test here is deterministic (``derandomize=True``, no example database) and
bounded (``max_examples`` in the low hundreds, ``deadline=None``), so the suite stays fast
and never flakes on a slow machine.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from gfd.labelers.options import LABEL_SETS, MIG_STRATEGIES, LabelOptions
from gfd.sharing import SharedResource, Sharing
from gfd.snapshot import COMPUTE_MODES, FABRIC_STATES, Fabric, Gpu, MigDevice, Snapshot, Vgpu


def fuzz_settings(max_examples: int = 150) -> settings:
    """The settings every property test in tests/fuzz uses."""
    return settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


REAL_NAMES = (
    "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", "Tesla T4",
    "NVIDIA A10", "NVIDIA GeForce RTX 3060 Laptop GPU", "NVIDIA GB200", "NVIDIA DGX Display",
    "Quadro RTX 8000 (with a very long marketing suffix that pushes past sixty-three chars)",
)
PROFILE_NAMES = ("MIG 1g.5gb", "MIG 1g.10gb+me", "MIG 1c.3g.20gb", "MIG 7g.40gb", "MIG 2g.10gb",
                 "", "MIG ", "1g.5gb")

texts = st.text(max_size=80)
"""Arbitrary text (any code point but surrogates), kept short enough to stay fast."""
names = st.one_of(st.sampled_from(REAL_NAMES), texts,
                  st.text(alphabet="abcXYZ019 -_.+/()", max_size=120))
u64 = st.integers(min_value=0, max_value=2**64 - 1)
u32 = st.integers(min_value=0, max_value=2**32 - 1)
small = st.integers(min_value=0, max_value=200)


def _indexed(items: list[Any]) -> tuple[Any, ...]:
    """Give each item its position as ``index`` (NVML indices are unique, 0-based)."""
    return tuple(replace(item, index=i) for i, item in enumerate(items))


mig_devices = st.builds(
    MigDevice,
    index=st.just(0),
    uuid=st.one_of(st.just(""), texts),
    gpu_instance_id=st.none() | small,
    compute_instance_id=st.none() | small,
    profile_name=st.one_of(st.sampled_from(PROFILE_NAMES), texts),
    memory_mib=st.one_of(st.sampled_from([0, 4864, 9856, 20096, 40448]), u32),
    multiprocessors=small,
    gi_slices=st.integers(0, 8),
    ci_slices=st.integers(0, 8),
    copy_engines=small,
    decoders=small,
    encoders=small,
    jpegs=small,
    ofas=small,
)

fabrics = st.builds(
    Fabric,
    state=st.one_of(st.sampled_from(FABRIC_STATES), texts),
    status_ok=st.booleans(),
    cluster_uuid=st.one_of(st.just("00000000-0000-0000-0000-000000000000"), st.uuids().map(str),
                           texts),
    clique_id=st.integers(-(2**31), 2**32),
)

gpus = st.builds(
    Gpu,
    index=st.just(0),
    uuid=st.one_of(st.just(""), texts),
    name=names,
    memory_total_bytes=st.none() | st.sampled_from([0, 85520809984, 42949672960]) | u64,
    compute_capability=st.none() | st.tuples(st.integers(0, 2**31), st.integers(0, 2**31)),
    architecture=st.none() | st.sampled_from(["hopper", "ampere", "turing", "blackwell"]) | texts,
    brand=st.none() | st.sampled_from(["nvidia", "tesla", "geforce"]) | texts,
    pci_bus_id=st.one_of(st.just("00000000:18:00.0"), texts),
    pci_class=st.none() | st.sampled_from(["0x030000", "0x030200", "0x068000"]) | texts,
    mig_capable=st.booleans(),
    mig_enabled=st.booleans(),
    mig_pending_enabled=st.none() | st.booleans(),
    compute_mode=st.none() | st.sampled_from(COMPUTE_MODES) | texts,
    nvlink_active=st.none() | st.booleans(),
    timeslice=st.none() | st.sampled_from(["default", "short", "medium", "long"]) | texts,
    fabric=st.none() | fabrics,
    mig_devices=st.lists(mig_devices, max_size=4).map(_indexed),
    error=st.one_of(st.none(), st.none(), st.none(),
                    st.sampled_from(["GPU is lost", "Unknown Error"]), texts),
)

valid_drivers = st.sampled_from(["550.54.15", "580.95", "1.2.3", "0.0"])
snapshots = st.builds(
    Snapshot,
    nvml_available=st.sampled_from([True, True, True, False]),
    nvml_error=texts,
    driver_version=st.one_of(valid_drivers, valid_drivers, valid_drivers, st.none(), texts),
    cuda_driver_version=st.none() | st.integers(-(2**31), 2**31 - 1),
    machine_type=st.none() | texts,
    vgpu=st.none() | st.builds(Vgpu, present=st.booleans(), host_driver_version=texts,
                               host_driver_branch=texts),
    gpus=st.lists(gpus, max_size=5).map(_indexed),
    source=texts,
)

resource_names = st.one_of(
    st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.10gb.me"]),
    texts)
sharings = st.builds(
    Sharing,
    strategy=st.sampled_from(["none", "none", "time-slicing", "time-slicing", "mps"]),
    rename_by_default=st.booleans(),
    resources=st.lists(st.builds(SharedResource, name=resource_names,
                                 replicas=st.integers(1, 2**31)), max_size=3).map(tuple),
    source=texts,
)
label_options = st.builds(
    LabelOptions,
    mig_strategy=st.sampled_from((*MIG_STRATEGIES, "mixed", "single")),
    sharing=sharings,
    label_set=st.sampled_from(LABEL_SETS),
    timestamp=st.none() | st.integers(0, 2**40),
    accelerator_label=st.none() | st.sampled_from(
        ["accelerator", "cloud.google.com/gke-accelerator", "Not A Key!", ""]) | texts,
)

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False), texts)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(texts, children,
                                                                       max_size=5),
    max_leaves=30,
)
"""Any JSON value (no NaN/Infinity: they are not JSON)."""
