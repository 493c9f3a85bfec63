"""Logging: setup (called only by cli.py; text or JSON lines on stderr) and `Once`, which
logs a recurring problem once instead of every cycle."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


def fields(**values: object) -> dict[str, Any]:
    """``extra=`` for a log call with structured values: each becomes a field of the JSON
    line (the text line shows only the message, which says the same for people)."""
    return {"fields": values}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg (and exc when present), then the
    call's ``fields`` (:func:`fields`), each a JSON value."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            for key, value in extra.items():
                entry.setdefault(key, value)
        return json.dumps(entry, sort_keys=True, default=str)


def configure(*, level: str = "info", fmt: str = "text") -> None:
    """Route gfd's logs to stderr in the chosen format; idempotent."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("gfd")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


class Once:
    """Logs each distinct message (or ``key``) once, until ``reset()`` -- e.g. when the
    failure it reports has cleared. The one way gfd avoids repeating itself every cycle."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._seen: set[str] = set()

    def log(self, level: int, message: str, *args: object, key: str = "") -> bool:
        """Log unless already logged since the last reset; True when it was logged now."""
        text = message % args if args else message
        mark = key or text
        if mark in self._seen:
            return False
        self._seen.add(mark)
        self._logger.log(level, "%s", text)
        return True

    def warning(self, message: str, *args: object, key: str = "") -> bool:
        return self.log(logging.WARNING, message, *args, key=key)

    def error(self, message: str, *args: object, key: str = "") -> bool:
        return self.log(logging.ERROR, message, *args, key=key)

    def reset(self) -> bool:
        """Forget what was logged; True if there was anything to forget."""
        had = bool(self._seen)
        self._seen.clear()
        return had
