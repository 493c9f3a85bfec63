"""The cluster's DeviceClasses as the scheduler uses them: the class objects the API server
holds, selectors and all (the driver chart's own only when none could be read), which class
serves an extended resource, and which classes a device belongs to.

- A class serves the extended resource its ``spec.extendedResourceName`` names, and always
  ``deviceclass.resource.kubernetes.io/<name>``; of several naming one resource the scheduler
  takes the newest, the lower name on a tie (kube-scheduler
  ``pkg/scheduler/framework/plugins/dynamicresources/extended/``: ``DeviceClassMapping``,
  ``preferableClass``, ``deviceClassCmp``).
- A device belongs to a class when every one of the class's CEL selectors holds for it; a
  selector that cannot be decided leaves the device's membership undecided ("cannot tell"),
  never out (``allocator_*.go``: ``selectorsMatch``, the class's selectors first)."""

from __future__ import annotations

from dataclasses import dataclass

from gfd import dra
from gfd.fleet.cel import Evaluator
from gfd.fleet.model import Device, DeviceClass, Fleet

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
"""``resourceapi.ResourceDeviceClassPrefix``: every class's implicit extended resource."""


def chart_classes() -> dict[str, DeviceClass]:
    """The driver chart's DeviceClasses (``gfd.dra``), for a fleet whose classes were not
    read."""
    return {name: DeviceClass(name=name, selectors=(expression,),
                              extended_resource=dra.EXTENDED_RESOURCES.get(name, ""))
            for name, expression in dra.DEVICE_CLASSES.items()}


@dataclass(frozen=True, slots=True)
class Member:
    device_class: DeviceClass
    decided: bool
    """False: a selector could not be decided for the device (cannot tell)."""
    reason: str = ""


class Classes:
    """The classes a fleet's claims are allocated by, and the verdicts of their selectors
    (each device judged once per class)."""

    def __init__(self, fleet: Fleet, evaluator: Evaluator | None = None) -> None:
        self.assumed = not fleet.classes_read
        """The cluster's classes were not read: the driver chart's stand in."""
        self.by_name = dict(fleet.classes) if fleet.classes_read else chart_classes()
        self.evaluator = evaluator or Evaluator()
        self._sorted = sorted(self.by_name.values(), key=lambda c: c.name)
        self._extended: dict[str, DeviceClass] = {}
        for c in sorted(self.by_name.values(), key=lambda c: c.name):
            self._extended[IMPLICIT_PREFIX + c.name] = c
        for c in self.by_name.values():
            if c.extended_resource:
                have = self._extended.get(c.extended_resource)
                if have is None or _newer(c, have):
                    self._extended[c.extended_resource] = c

    def serving(self, resource: str) -> DeviceClass | None:
        """The class through which the scheduler serves ``resource`` on a node without it
        allocatable (None: no class maps it)."""
        return self._extended.get(resource)

    def members(self, device: Device) -> list[Member]:
        """The classes the device belongs to (decided) or may belong to (undecided), by
        name."""
        found = []
        for c in self._sorted:
            verdict = self.judge(c, device)
            if verdict is not False:
                found.append(Member(c, verdict is True,
                                    "" if verdict is True else self.why(c, device)))
        return found

    def judge(self, device_class: DeviceClass, device: Device) -> bool | None:
        """Whether every selector of the class holds for the device (None: cannot tell)."""
        result: bool | None = True
        for expression in device_class.selectors:
            verdict = self.evaluator.matches(expression, device)
            if verdict is False:
                return False
            if verdict is None:
                result = None
        return result

    def why(self, device_class: DeviceClass, device: Device) -> str:
        """The first selector of the class that cannot be decided for the device, and why."""
        for i, expression in enumerate(device_class.selectors):
            outcome = self.evaluator.evaluate(expression, device)
            if outcome.matched is None:
                return f"class {device_class.name} selector #{i}: {outcome.reason}"
        return ""


def _newer(a: DeviceClass, b: DeviceClass) -> bool:
    """``deviceClassCmp``: created later, or at the same time with the lower name."""
    if a.created == b.created:
        return a.name < b.name
    return a.created > b.created
