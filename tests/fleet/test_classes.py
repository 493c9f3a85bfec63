"""The cluster's DeviceClasses as kube-scheduler uses them:

- the class serving an extended resource is the newest of those naming it in
  ``spec.extendedResourceName``, the lower name on a tie, and every class serves
  ``deviceclass.resource.kubernetes.io/<name>`` (kube-scheduler
  ``pkg/scheduler/framework/plugins/dynamicresources/extended/``: ``DeviceClassMapping``,
  ``preferableClass``, ``deviceClassCmp``);
- a device is of a class when every selector of the class holds for it (``allocator_*.go``,
  ``selectorsMatch`` on the class's selectors), the class as the API server holds it;
- the driver chart's classes stand in only where no class was read.

Devices are those the NVIDIA DRA driver publishes (``gfd.devices.resource_slices``)."""

from __future__ import annotations

from functools import cache

import pytest
from helpers import fleetobjects as fo

from gfd import dra
from gfd.devices import resource_slices
from gfd.fleet.classes import IMPLICIT_PREFIX, Classes, chart_classes
from gfd.fleet.model import Device, DeviceClass, Fleet, slice_of
from gfd.readers.simulate import simulate

GPU = "nvidia.com/gpu"


def fleet(*classes: DeviceClass, read: bool = True) -> Fleet:
    return Fleet(nodes={}, pods=[], slices=[], claims={}, incomplete=[],
                 classes={c.name: c for c in classes}, classes_read=read)


@cache
def h100() -> Device:
    return slice_of(resource_slices(simulate("hgx-h100").snapshot, node="n")[0]).devices[0]


def test_the_newest_class_naming_an_extended_resource_serves_it() -> None:
    old = DeviceClass(name="a-old", extended_resource=GPU, created="2026-01-01T00:00:00Z")
    new = DeviceClass(name="z-new", extended_resource=GPU, created="2026-03-01T00:00:00Z")
    for order in ((old, new), (new, old)):
        served = Classes(fleet(*order)).serving(GPU)
        assert served is not None and served.name == "z-new"


def test_of_two_classes_created_at_once_the_lower_name_serves() -> None:
    at = "2026-01-01T00:00:00Z"
    b = DeviceClass(name="b", extended_resource=GPU, created=at)
    a = DeviceClass(name="a", extended_resource=GPU, created=at)
    for order in ((a, b), (b, a)):
        served = Classes(fleet(*order)).serving(GPU)
        assert served is not None and served.name == "a"


def test_every_class_serves_its_implicit_extended_resource() -> None:
    c = DeviceClass(name="gpu.example.com")
    classes = Classes(fleet(c))
    assert classes.serving(IMPLICIT_PREFIX + "gpu.example.com") == c
    assert classes.serving(GPU) is None


def test_the_chart_classes_stand_in_only_when_none_were_read() -> None:
    assumed = Classes(fleet(read=False))
    assert assumed.assumed and set(assumed.by_name) == set(dra.DEVICE_CLASSES)
    served = assumed.serving(GPU)
    assert served is not None and served.name == dra.GPU_CLASS
    read = Classes(fleet())
    assert not read.assumed and read.by_name == {} and read.serving(GPU) is None


def test_a_device_is_of_the_classes_whose_every_selector_holds() -> None:
    """The chart's gpu class holds for a full GPU, the mig class does not; a cluster class
    with an extra selector holds only where that selector does too."""
    chart = chart_classes()
    extra = DeviceClass(name="h100-only", selectors=(
        *chart[dra.GPU_CLASS].selectors,
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"))
    other = DeviceClass(name="a100-only", selectors=(
        *chart[dra.GPU_CLASS].selectors,
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'"))
    classes = Classes(fleet(*chart.values(), extra, other))
    members = classes.members(h100())
    assert [(m.device_class.name, m.decided) for m in members] == [
        (dra.GPU_CLASS, True), ("h100-only", True)]


def test_a_class_without_selectors_takes_every_device() -> None:
    """No selector: nothing to fail (``selectorsMatch`` over an empty list is true)."""
    c = DeviceClass(name="any")
    assert Classes(fleet(c)).judge(c, h100()) is True


# extendedresourcecache.go betterDeviceClass (pkg/scheduler/framework/plugins/
# dynamicresources/extendedresourcecache): compare CreationTimestamp.UnixNano(), newer wins,
# then the lower name; a class without a creation time has the zero time, older than any.

CREATED = [
    ("a later day wins over an earlier one", ("b", "2026-03-02T00:00:00Z"),
     ("a", "2026-03-01T23:59:59Z"), "b"),
    ("a later second wins", ("b", "2026-03-01T10:00:01Z"), ("a", "2026-03-01T10:00:00Z"), "b"),
    ("the same second: the lower name", ("b", "2026-03-01T10:00:00Z"),
     ("a", "2026-03-01T10:00:00Z"), "a"),
    ("no creation time is the oldest", ("a", ""), ("b", "2020-01-01T00:00:00Z"), "b"),
    ("two without a creation time: the lower name", ("b", ""), ("a", ""), "a"),
]


@pytest.mark.parametrize("one, other, winner", [(o, t, w) for _, o, t, w in CREATED],
                         ids=[n for n, *_ in CREATED])
def test_the_class_serving_an_extended_resource_is_chosen_as_the_scheduler_chooses(
        one: tuple[str, str], other: tuple[str, str], winner: str) -> None:
    for first, second in ((one, other), (other, one)):
        read = fo.fleet(*(fo.device_class(name, extended=GPU, created=at)
                          for name, at in (first, second)))
        served = Classes(read).serving(GPU)
        assert served is not None and served.name == winner


def test_a_class_read_from_the_cluster_replaces_the_charts_of_the_same_name() -> None:
    """The cluster's gpu.nvidia.com selects A100s only, and names no extended resource: an
    H100 is of no class, and nvidia.com/gpu is served by none."""
    a100_only = f"device.attributes['{dra.DRIVER}'].productName == '{fo.A100}'"
    classes = Classes(fo.fleet(fo.device_class(dra.GPU_CLASS, fo.GPU_SELECTOR, a100_only)))
    assert classes.members(h100()) == []
    assert classes.serving(GPU) is None
    assert classes.serving(IMPLICIT_PREFIX + dra.GPU_CLASS) is not None


def test_the_charts_classes_match_the_drivers_devices_by_type() -> None:
    """Without classes read: the whole GPU is gpu.nvidia.com's, a MIG device mig.nvidia.com's
    (the chart's selectors: device.driver and the type attribute)."""
    classes = Classes(fleet(read=False))
    mig = Device(driver=dra.DRIVER, pool="n", name="gpu-0-mig-1g", node="n",
                 attributes={"type": "mig"}, capacity={})
    assert [m.device_class.name for m in classes.members(h100())] == [dra.GPU_CLASS]
    assert [m.device_class.name for m in classes.members(mig)] == [dra.MIG_CLASS]
