"""The reader layer's one failure type: a call into a GPU library (NVML, the CUDA driver API)
that did not succeed, with what a message needs (internal to the readers: each reader turns
it into a ``GfdError`` or a degraded fact)."""

from __future__ import annotations

from gfd.errors import one_line


class CallFailed(Exception):
    """A library call that failed: the library (``NVML``, ``CUDA``), the call, the library's
    error code and the error itself (the binding's exception, or one holding the library's
    own text: the cause of what a reader raises from it); ``gpu``, the GPU it was about, when
    known."""

    def __init__(self, library: str, call: str, code: int, error: BaseException) -> None:
        super().__init__(call, code)
        self.library = library
        self.call = call
        self.code = code
        self.error = error
        self.gpu: int | None = None

    @property
    def message(self) -> str:
        """The error on one line."""
        return one_line(str(self.error))

    def describe(self, gpu: int | None = None) -> str:
        """``NVML nvmlDeviceGetName failed for GPU 3: Unknown Error``; ``gpu`` (or the one
        recorded) names the GPU."""
        which = self.gpu if gpu is None else gpu
        where = f" for GPU {which}" if which is not None else ""
        return f"{self.library} {self.call} failed{where}: {self.message}"


__all__ = ["CallFailed"]
