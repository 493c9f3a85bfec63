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
