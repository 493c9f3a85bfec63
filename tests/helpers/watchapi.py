"""``HeldList``: an API sink's watch API over gfd's ``Kube`` whose LIST answers are held back
until the test releases them (a read taken before gfd's write and delivered after it)."""

from __future__ import annotations

import threading
from typing import Any

from gfd.kube import Kube


class HeldList:
    """The sink's watch API, whose LIST is answered at once but handed to the watch only when
    the test says: a read taken before gfd's write and delivered after it. The first
    ``free`` reads are handed on at once. ``watches`` counts the watch requests: the watch
    opens one only after it has reported the state its read found."""

    def __init__(self, kube: Kube, free: int = 0) -> None:
        self.kube = kube
        self.free = free
        self.listed = threading.Event()
        self.release = threading.Event()
        self.watches = 0

    def list_object(self, *args: Any, **kwargs: Any) -> Any:
        answer = self.kube.list_object(*args, **kwargs)
        if self.free > 0:
            self.free -= 1
            return answer
        self.listed.set()
        self.release.wait(5)
        return answer

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        self.watches += 1
        return self.kube.watch(*args, **kwargs)
