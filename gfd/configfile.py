"""The device-plugin config file (v1): the same YAML/JSON file NVIDIA's device plugin reads.

One ConfigMap serves both daemons (docs/gfd-compatibility.md, "Config file"). This module
turns the file into ``FileConfig``: the settings it sets (keyed by ``gfd.config.Settings``
field names, so ``gfd.config.resolve`` can apply GFD's precedence), the normalised sharing
section, and warnings. Which ``flags`` fields exist, and how each value is checked, comes
from the settings table (``gfd.config``); the device plugin's own fields, which gfd checks
and ignores, are listed here. ``ConfigSource`` re-reads the file when asked and takes new
content only once it has settled (a file rewritten in place is never taken half-written).

Decisions (where GFD's Go loader is lenient, odd, or silent):

* Unknown fields are ignored with a warning naming them (and the closest known field, so
  a typo such as ``sleepIntervall`` is noticed): the device plugin's config grows new
  fields between releases and one ConfigMap serves both programs, so -- as GFD does --
  a file written for a newer plugin must still load. Field names are case-sensitive.
  Invalid values of known fields stay errors.
* Booleans must be real YAML/JSON booleans. YAML 1.1 spellings (``yes``/``no``/``on``/
  ``off``) are booleans, as in GFD's loader; quoted strings (``"true"``) are rejected,
  as GFD's loader rejects them (a JSON string does not unmarshal into a Go bool).
* ``flags.gfd.sleepInterval``: a Go duration string (``60s``, ``1m30s``), ``infinite``,
  or a bare number, which -- as in GFD -- counts *nanoseconds*; a bare number below
  one millisecond gets a warning because it is almost always meant as seconds.
* ``devices`` is validated as GFD validates it (``"all"``, a count > 0, or a list of GPU
  indices, ``<gpu>:<mig>`` MIG indices and GPU/MIG UUIDs); anything other than ``all``
  is then treated as ``all`` with a warning, as GFD does. A custom ``rename`` likewise.
* ``null`` values mean "not set", like a nil pointer in the Go structs.
* An empty file, or ``/dev/null`` (the config-manager's ``FALLBACK_STRATEGIES=empty``
  and the Helm chart's fallback link there), is a valid, empty config. Any other special
  file -- a FIFO, a socket, a directory, another device -- is refused with one line, without
  being opened (``gfd.hostfile``): it could block gfd forever or stream without end.
* A key given twice in one mapping is an error (YAML and JSON would silently keep the
  last one).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import yaml

from gfd.config import TABLE, Bool, Entry, Kind, PathKind, ValueProblem, kind_of
from gfd.errors import ConfigError, one_line, show
from gfd.fswatch import IN_CLOSE_WRITE, IN_MODIFY, DirWatch, start_watch
from gfd.hostfile import FileProblem, read_bytes
from gfd.sharing import SharedResource, Sharing
from gfd.triggers import Fire, Trigger, died

log = logging.getLogger(__name__)

VERSION = "v1"
RESOURCE_PREFIX = "nvidia.com"
MAX_RESOURCE_NAME_LENGTH = 63
_MAX_SYMLINKS = 40
"""As the kernel's limit: a longer chain is a loop."""
MAX_FILE_BYTES = 4 * 1024 * 1024
"""Refuse larger files (a ConfigMap holds at most 1 MiB; guards against /dev/zero)."""

_TOP = ("version", "flags", "resources", "sharing", "imex")


class _AnyMapping:
    """A field whose content gfd does not read (``flags.plugin``): only its shape is checked."""


_ANY_MAPPING = _AnyMapping()
Node = Entry | Kind | _AnyMapping | dict[str, "Node"]

PLUGIN_FLAGS: dict[str, Node] = {
    "mpsRoot": PathKind(), "nvidiaDriverRoot": PathKind(), "nvidiaDevRoot": PathKind(),
    "gdrcopyEnabled": Bool(), "gdsEnabled": Bool(), "mofedEnabled": Bool(),
    "restartOnDeviceUnhealthy": Bool(), "plugin": _ANY_MAPPING,
}
"""The device plugin's own ``flags``: checked for type, then ignored (gfd does not use them)."""


def flags_tree() -> dict[str, Node]:
    """The ``flags`` section's fields: the settings table's file paths plus the plugin's."""
    tree: dict[str, Node] = {"flags": dict(PLUGIN_FLAGS)}
    for entry in TABLE:
        if not entry.spec.file:
            continue
        *parents, leaf = entry.spec.file.split(".")
        node = tree
        for part in parents:
            child = node.setdefault(part, {})
            assert isinstance(child, dict)
            node = child
        node[leaf] = entry
    flags = tree["flags"]
    assert isinstance(flags, dict)
    return flags


_FLAGS_TREE = flags_tree()
_RESOURCES = ("gpus", "mig")
_RESOURCE = ("pattern", "name")
_SHARING = ("timeSlicing", "mps")
_REPLICATED = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
_REPLICATED_RESOURCE = ("name", "rename", "devices", "replicas")
_GO_INT_MAX = 2**63 - 1
"""The largest replicas the device plugin can read (a Go int); a larger one fails there."""
_IMEX = ("channelIDs", "required")

_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
_HEX32 = re.compile(r"[0-9a-fA-F]{32}")
_UUID36 = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_DEVICES_RULE = ('must be "all", a count > 0, or a list of GPU indices, MIG indices '
                 "(<gpu>:<mig>) or GPU/MIG UUIDs")


@dataclass(frozen=True, slots=True, kw_only=True)
class FileConfig:
    """One parsed, checked config file."""

    path: str
    values: dict[str, Any] = field(default_factory=dict)
    """Settings the file sets, keyed by ``gfd.config.Settings`` field names; only keys
    present in the file (``sleep_interval`` in seconds, None meaning ``infinite``)."""
    sharing: Sharing = field(default_factory=Sharing)
    """Normalised as GFD does (docs/gfd-compatibility.md, "Sharing"); ``Sharing()`` without a
    sharing section."""
    warnings: tuple[str, ...] = ()
    """One-line messages for settings accepted but ignored or suspicious."""
    digest: str = ""
    """sha256 (hex) of the raw bytes, for change detection."""


def load_config_file(path: str) -> FileConfig:
    """Read and parse the config file at ``path``; ConfigError (one line) when it fails."""
    raw = _read(path)
    return _parse_bytes(raw, path=path, digest=hashlib.sha256(raw).hexdigest())


def parse_config(text: str, *, path: str) -> FileConfig:
    """Parse config-file text (no I/O); ``path`` only names the file in messages."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return _Parser(path).parse(text, digest=digest)


QUIET = 1.0
"""Seconds a config file rewritten in place must stay unchanged before it is taken: a writer
that truncates the file and then writes it (``slow-cmd > config.yaml``) is never read in its
empty or half-written state, however valid that state is."""


WRITER_GRACE = 10.0
"""Seconds a file a writer modified and still holds open counts as being written; a writer
that keeps it open longer without writing is taken to be done."""


class Writers:
    """Which files a writer modified and has not closed yet, as ``ConfigWatch`` sees it
    (inotify ``IN_MODIFY`` ... ``IN_CLOSE_WRITE``), keyed by real path; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[str, float] = {}

    def modified(self, path: str) -> None:
        with self._lock:
            self._open[path] = self._clock()

    def closed(self, path: str) -> None:
        with self._lock:
            self._open.pop(path, None)

    def writing(self, path: str) -> bool:
        """A writer modified ``path`` within ``WRITER_GRACE`` and has not closed it."""
        with self._lock:
            since = self._open.get(path)
        return since is not None and self._clock() - since < WRITER_GRACE


@dataclass(frozen=True, slots=True)
class _Stat:
    """What tells one state of a file from another without reading it."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    regular: bool


def _stat(path: str) -> _Stat | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _Stat(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                 stat.S_ISREG(st.st_mode))


class ConfigSource:
    """Watches one config file: poll() returns a new FileConfig when the content changed
    (or force=True, e.g. on SIGHUP), None when unchanged; raises ConfigError when the new
    content is invalid -- the caller keeps the last good config. A missing file after a
    good one is an error too (reported, last good kept).

    New content is taken only once it is settled, else poll() returns None and the last good
    config stays: a file swapped in through a symlink (a ConfigMap's ``..data`` flip, the
    config-manager re-pointing ``config.yaml``) at once; a regular file rewritten in place
    once it has not changed for ``quiet`` seconds (its modification time, or as long as this
    source has seen the same content), so an empty, shrinking or half-written file is never a
    new config. ``ConfigWatch`` polls again when that time is up."""

    def __init__(self, path: str, *, current: FileConfig | None = None, quiet: float = QUIET,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.writers = Writers(clock)
        """Filled by a ``ConfigWatch``: a file a writer still holds open is not settled."""
        self._path = path
        self._current = current
        """The config in use (e.g. the one read at start), so an unchanged file is no news."""
        self._quiet = quiet
        self._clock = clock
        self._wall = wall
        self._real = os.path.realpath(path)
        """Where the path led when the config in use was read."""
        self._seen: tuple[str, _Stat] | None = None
        self._seen_at = 0.0

    @property
    def path(self) -> str:
        return self._path

    @property
    def quiet(self) -> float:
        return self._quiet

    @property
    def current(self) -> FileConfig | None:
        """The last good config, None before the first successful poll."""
        return self._current

    def poll(self, *, force: bool = False) -> FileConfig | None:
        real = os.path.realpath(self._path)
        before = _stat(self._path)
        raw = _read(self._path)
        after = _stat(self._path)
        digest = hashlib.sha256(raw).hexdigest()
        unchanged = self._current is not None and self._current.digest == digest
        if unchanged:
            self._seen = None
            if not force:
                return None
        elif not self._settled(digest, before, after, real):
            return None
        config = _parse_bytes(raw, path=self._path, digest=digest)
        self._current, self._real, self._seen = config, real, None
        return config

    def _settled(self, digest: str, before: _Stat | None, after: _Stat | None,
                 real: str) -> bool:
        """Whether content just read may replace the config in use (see the class)."""
        if before is None or after is None or before != after:
            self._seen = None
            return False  # changed while read: being written
        if self._current is None or not after.regular or real != self._real:
            return True  # nothing to keep; /dev/null; or swapped in through a link
        if self.writers.writing(real):
            log.debug("%s: a writer has it open; keeping the last good config",
                      _label(self._path))
            return False
        coarse = 1.0 if after.mtime_ns % 1_000_000_000 == 0 else 0.0  # whole-second mtimes
        if self._wall() - after.mtime_ns / 1e9 >= self._quiet + coarse:
            return True  # not modified for the quiet period
        now = self._clock()
        if self._seen != (digest, after):
            self._seen, self._seen_at = (digest, after), now
            log.debug("%s is changing; keeping the last good config until it has been "
                      "quiet for %gs", _label(self._path), self._quiet)
            return False
        return now - self._seen_at >= self._quiet


def watched_directories(path: str) -> list[str]:
    """The directories whose entries decide what ``path`` reads: its own, and that of every
    symlink it passes through and of the file it ends at. A ConfigMap volume swaps its
    ``..data`` symlink and GFD's config-manager re-points ``config.yaml``; both show up as an
    entry changing in one of these, as does an edit of the file itself."""
    found: dict[str, None] = {}
    current = os.path.abspath(path)
    for _ in range(_MAX_SYMLINKS):
        found[os.path.dirname(current)] = None
        try:
            target = os.readlink(current)
        except OSError:  # not a symlink (or gone): the chain ends here
            break
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    found[os.path.dirname(os.path.realpath(path))] = None
    return list(found)


def chain_paths(path: str) -> set[str]:
    """Every path whose entry decides what ``path`` reads: each path of its symlink chain,
    the file it ends at, and every directory above them (a ``..data`` link among them)."""
    found: set[str] = set()
    current = os.path.abspath(path)
    for _ in range(_MAX_SYMLINKS):
        found.add(current)
        try:
            target = os.readlink(current)
        except OSError:
            break
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    found.add(os.path.realpath(path))
    for entry in list(found):
        while (parent := os.path.dirname(entry)) != entry:
            found.add(parent)
            entry = parent
    return found


class ConfigWatch:
    """Fires a ``config`` trigger when the config file may have changed (inotify on
    :func:`watched_directories`, re-computed after each change as symlinks move).

    Only entries of the file's symlink chain count (:func:`chain_paths`): a log or any busy
    file beside the config wakes nothing. After a change it fires once more when the file has
    been quiet for ``quiet`` seconds, so a file rewritten in place (which ``ConfigSource``
    takes only once settled) is read again when it is."""

    def __init__(self, path: str, fire: Fire, *, clock: Callable[[], float] = time.monotonic,
                 quiet: float = QUIET, writers: Writers | None = None) -> None:
        self._writers = writers
        self._path = path
        self._fire = fire
        self._clock = clock
        self._quiet = quiet
        self._watch: DirWatch | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._closed = False

    def start(self) -> bool:
        """True when watching; False (with the reason logged once) when the agent must check
        the file every cycle instead."""
        started = start_watch(lambda directory, name: self._changed(directory, name, 0),
                              watched_directories(self._path), name="config-watch",
                              on_event=self._changed, on_death=self._died,
                              fallback="the config file is checked every cycle instead")
        if isinstance(started, str):
            log.info("%s", started)
            return False
        self._watch = started
        return True

    def _died(self, why: BaseException) -> None:
        self._fire(died("config", why, self._clock()))

    def _changed(self, directory: str, name: str, mask: int) -> None:
        assert self._watch is not None
        self._watch.watch(watched_directories(self._path))  # a new ..data target, say
        entry = os.path.join(directory, name) if name else directory
        if name and entry not in chain_paths(self._path):
            return  # a file beside the config
        if self._writers is not None and mask & (IN_MODIFY | IN_CLOSE_WRITE):
            real = os.path.realpath(entry)
            if mask & IN_MODIFY:
                self._writers.modified(real)
            else:
                self._writers.closed(real)
        self._fire(Trigger(source="config", kind="changed", at=self._clock(),
                           detail=entry, reload_config=True))
        with self._lock:
            if self._closed:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self._quiet + 0.05, self._quieted, args=(entry,))
            self._timer.daemon = True
            self._timer.start()

    def _quieted(self, entry: str) -> None:
        with self._lock:
            self._timer = None
            if self._closed:
                return
        self._fire(Trigger(source="config", kind="settled", at=self._clock(), detail=entry,
                           reload_config=True))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if self._watch is not None:
            self._watch.close()
            self._watch = None


# --- reading ---------------------------------------------------------------------------


def _label(path: str) -> str:
    shown = path if path.isprintable() else repr(path)
    return f"config file {shown}"


def _read(path: str) -> bytes:
    where = _label(path)
    fix = "(check --config-file / CONFIG_FILE)"
    try:
        return read_bytes(path, limit=MAX_FILE_BYTES, null_ok=True)
    except FileProblem as exc:
        if exc.reason == "missing":
            raise ConfigError(f"{where}: not found {fix}") from None
        if exc.reason == "denied":
            raise ConfigError(f"{where}: permission denied (check the file's mode and the user "
                              "gfd runs as, or --config-file / CONFIG_FILE)") from None
        if exc.reason == "directory":
            raise ConfigError(f"{where}: is a directory, not a file {fix}") from None
        if exc.reason == "special":
            raise ConfigError(f"{where}: {exc.problem}: gfd reads only a regular file, or "
                              "/dev/null for an empty config (point --config-file / "
                              "CONFIG_FILE at the mounted ConfigMap's file)") from None
        if exc.reason == "too-large":
            raise ConfigError(f"{where}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; "
                              f"not a device-plugin config {fix}") from None
        raise ConfigError(f"{where}: {exc.problem}") from None


def _parse_bytes(raw: bytes, *, path: str, digest: str) -> FileConfig:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{_label(path)}: not valid UTF-8 text (byte {exc.start})") from None
    return _Parser(path).parse(text, digest=digest)


# --- YAML / JSON loading -----------------------------------------------------------------


class _DuplicateKeyError(Exception):
    def __init__(self, key: object, line: int | None) -> None:
        super().__init__(key, line)
        self.key = key
        self.line = line


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (merge keys excepted)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[object] = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                if not isinstance(key, Hashable):
                    continue
                if key in seen:
                    raise _DuplicateKeyError(key, key_node.start_mark.line + 1)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeyError(key, None)
        result[key] = value
    return result


def _yaml_problem(exc: Exception) -> str:
    """PyYAML's message without its multi-line source excerpt."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        context = f"{exc.context}: " if exc.context else ""
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return one_line(f"{context}{exc.problem}{where}")
    return one_line(str(exc))


def _load_document(text: str, where: str) -> object:
    body = text.lstrip("\ufeff \t\r\n")
    json_error: str | None = None
    if body.startswith("{"):
        try:
            return json.loads(body, object_pairs_hook=_json_pairs)
        except _DuplicateKeyError as exc:
            raise ConfigError(f"{where}: duplicate key {show(exc.key)} "
                              "(the later value would silently win)") from None
        except ValueError as exc:
            json_error = one_line(str(exc))  # maybe YAML flow style: try YAML next
        except RecursionError:
            json_error = "nested too deeply"
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader subclass
    except _DuplicateKeyError as exc:
        raise ConfigError(f"{where}: line {exc.line}: duplicate key {show(exc.key)} "
                          "(the later value would silently win)") from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        detail = json_error if json_error is not None else _yaml_problem(exc)
        raise ConfigError(f"{where}: not valid YAML or JSON: {detail or type(exc).__name__}") \
            from None


# --- checking -----------------------------------------------------------------------------


def _key_text(key: object) -> str:
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return key
    return show(key)


def _join(where: str, key: object) -> str:
    text = _key_text(key)
    return f"{where}.{text}" if where else text


def _unknown(key: object, known: tuple[str, ...]) -> str:
    """An unknown field's name, with the known field it most likely meant."""
    text = _key_text(key)
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.75) if isinstance(
        key, str) else []
    if not close and isinstance(key, str):
        close = [k for k in known if k.lower() == key.lower()]
    return f"{text} (did you mean {close[0]}?)" if close else text


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_uuid(text: str) -> bool:
    if len(text) == 45 and text[:9].lower() == "urn:uuid:":
        text = text[9:]
    elif len(text) == 38 and text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    elif len(text) == 32:
        return bool(_HEX32.fullmatch(text))
    return bool(_UUID36.fullmatch(text))


def _is_index(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _is_device_ref(text: str) -> bool:
    """GFD's ReplicatedDeviceRef: GPU index, MIG index ``<gpu>:<mig>``, GPU or MIG UUID."""
    if _is_index(text):
        return True
    gpu, sep, mig = text.partition(":")
    if sep and _is_index(gpu) and _is_index(mig):
        return True
    if text.startswith("GPU-"):
        return _is_uuid(text[4:])
    if text.startswith("MIG-"):
        suffix = text[4:]
        if _is_uuid(suffix):
            return True
        parts = suffix.split("/", 2)
        return (len(parts) == 3 and parts[0].startswith("GPU-") and _is_uuid(parts[0][4:])
                and _is_index(parts[1]) and _is_index(parts[2]))
    return False


@dataclass(frozen=True, slots=True)
class _Section:
    rename_by_default: bool
    resources: tuple[SharedResource, ...]


class _Parser:
    """Checks one document; collects warnings; raises ConfigError on the first problem."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.where = _label(path)
        self.warnings: list[str] = []

    def fail(self, field_path: str, rule: str) -> ConfigError:
        prefix = f"{self.where}: {field_path}: " if field_path else f"{self.where}: "
        return ConfigError(prefix + rule)

    def warn(self, field_path: str, message: str) -> None:
        self.warnings.append(f"{self.where}: {field_path}: {message}")

    # generic shapes

    def mapping(self, value: object, where: str, known: tuple[str, ...]) -> dict[str, Any]:
        """The mapping's set (non-null) known fields; unknown ones are warned about once per
        mapping and ignored."""
        if not isinstance(value, dict):
            raise self.fail(where, f"must be a mapping, got {kind_of(value)}: {show(value)}")
        result: dict[str, Any] = {}
        unknown: list[str] = []
        for key, item in value.items():
            if not isinstance(key, str) or key not in known:
                unknown.append(_unknown(key, known))
            elif item is not None:
                result[key] = item
        if unknown:
            plural = "s" if len(unknown) > 1 else ""
            self.warnings.append(
                f"{self.where}: {where or 'top level'}: unknown field{plural} ignored: "
                f"{', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return result

    def boolean(self, value: object, where: str) -> bool:
        """A file's boolean, by the settings table's own rule (``config.Bool``)."""
        try:
            return Bool().from_file(value, self.warnings.append)
        except ValueProblem as exc:
            raise self.fail(where, str(exc)) from None

    def string(self, value: object, where: str) -> str:
        if isinstance(value, str):
            return value
        raise self.fail(where, f"must be a string, got {kind_of(value)}: {show(value)}")

    def sequence(self, value: object, where: str) -> list[Any]:
        if isinstance(value, list):
            return value
        raise self.fail(where, f"must be a list, got {kind_of(value)}: {show(value)}")

    # the document

    def parse(self, text: str, *, digest: str) -> FileConfig:
        document = _load_document(text, self.where)
        if document is None:
            document = {}
        if not isinstance(document, dict):
            raise self.fail("", f"expected a mapping at the top level, got {kind_of(document)}")
        top = self.mapping(document, "", _TOP)
        version = top.get("version", "")
        if version not in ("", VERSION):
            raise self.fail("version", f"must be {VERSION}, got {show(version)}")
        values: dict[str, Any] = {}
        if "flags" in top:
            self.section(top["flags"], "flags", _FLAGS_TREE, values)
        if "resources" in top:
            self.resources(top["resources"])
        sharing = self.sharing(top["sharing"]) if "sharing" in top else Sharing()
        if "imex" in top:
            self.imex(top["imex"])
        return FileConfig(path=self.path, values=values, sharing=sharing,
                          warnings=tuple(self.warnings), digest=digest)

    def section(self, value: object, where: str, tree: dict[str, Node],
                values: dict[str, Any]) -> None:
        """A mapping whose fields are settings (stored in ``values``), the device plugin's own
        fields (checked, ignored) or further sections, as the settings table lays them out."""
        for key, item in self.mapping(value, where, tuple(tree)).items():
            node, here = tree[key], f"{where}.{key}"
            if isinstance(node, Entry):
                values[node.name] = self.setting(node.spec.kind, item, here)
            elif isinstance(node, dict):
                self.section(item, here, node, values)
            elif isinstance(node, _AnyMapping):
                if not isinstance(item, dict):
                    raise self.fail(here, f"must be a mapping, got {kind_of(item)}: {show(item)}")
            else:
                self.setting(node, item, here)

    def setting(self, kind: Kind, value: object, where: str) -> Any:
        try:
            return kind.from_file(value, lambda message: self.warn(where, message))
        except ValueProblem as exc:
            raise self.fail(where, str(exc)) from None

    def resource_name(self, value: object, where: str) -> str:
        name = self.string(value, where)
        full = name if name.startswith(RESOURCE_PREFIX + "/") else f"{RESOURCE_PREFIX}/{name}"
        if len(full) > MAX_RESOURCE_NAME_LENGTH:
            raise self.fail(where, f"{show(full)} is too long: a full resource name must be at "
                                   f"most {MAX_RESOURCE_NAME_LENGTH} characters, got {len(full)}")
        _, _, short = full.partition("/")
        if not (len(short) <= 253 and _DNS_SUBDOMAIN.fullmatch(short)):
            raise self.fail(where, f"{show(name)} is not a valid resource name: the part after "
                                   f"'{RESOURCE_PREFIX}/' must be a DNS subdomain (lowercase "
                                   "letters, digits, '-' and '.', starting and ending with a "
                                   "letter or digit)")
        return full

    def resources(self, value: object) -> None:
        section = self.mapping(value, "resources", _RESOURCES)
        customised = False
        for kind in _RESOURCES:
            if kind not in section:
                continue
            where = f"resources.{kind}"
            for index, entry in enumerate(self.sequence(section[kind], where)):
                entry_where = f"{where}[{index}]"
                fields = self.mapping(entry, entry_where, _RESOURCE)
                for required in _RESOURCE:
                    if required not in fields:
                        raise self.fail(f"{entry_where}.{required}", "required")
                self.string(fields["pattern"], f"{entry_where}.pattern")
                self.resource_name(fields["name"], f"{entry_where}.name")
                customised = True
        if customised:
            self.warn("resources", "customizing the 'resources' field is not supported; ignored")

    def sharing(self, value: object) -> Sharing:
        sharing = self.mapping(value, "sharing", _SHARING)
        sections = {key: self.replicated(sharing[key], f"sharing.{key}")
                    for key in _SHARING if key in sharing}
        mps = sections.get("mps")
        time_slicing = sections.get("timeSlicing")
        if mps is not None:
            supplier_key, supplier = "mps", mps
            if time_slicing is not None:
                self.warn("sharing.timeSlicing", "ignored because sharing.mps is present "
                                                 "(replicas come from the MPS section)")
        elif time_slicing is not None:
            supplier_key, supplier = "timeSlicing", time_slicing
        else:
            return Sharing()
        if mps is not None and any(r.replicas > 1 for r in mps.resources):
            strategy = "mps"
        elif time_slicing is not None and any(r.replicas > 1 for r in time_slicing.resources):
            strategy = "time-slicing"
        else:
            strategy = "none"
        return Sharing(strategy=strategy, rename_by_default=supplier.rename_by_default,
                       resources=supplier.resources,
                       source=f"{self.where}: sharing.{supplier_key}")

    def replicated(self, value: object, where: str) -> _Section:
        section = self.mapping(value, where, _REPLICATED)
        rename_by_default = False
        if "renameByDefault" in section:
            rename_by_default = self.boolean(section["renameByDefault"],
                                             f"{where}.renameByDefault")
        if "failRequestsGreaterThanOne" in section:
            self.boolean(section["failRequestsGreaterThanOne"],
                         f"{where}.failRequestsGreaterThanOne")
        if "resources" not in section:
            raise self.fail(f"{where}.resources",
                            "required: a non-empty list of {name, replicas}")
        entries = self.sequence(section["resources"], f"{where}.resources")
        if not entries:
            raise self.fail(f"{where}.resources", "must be a non-empty list, got []")
        resources: list[SharedResource] = []
        first: dict[str, int] = {}
        for index, entry in enumerate(entries):
            entry_where = f"{where}.resources[{index}]"
            resource = self.replicated_resource(entry, entry_where, rename_by_default)
            if resource.name in first:
                self.warn(f"{entry_where}.name",
                          f"{resource.name} is also resources[{first[resource.name]}]; "
                          "the first entry is used")
            else:
                first[resource.name] = index
            resources.append(resource)
        return _Section(rename_by_default=rename_by_default, resources=tuple(resources))

    def replicated_resource(self, value: object, where: str,
                            rename_by_default: bool) -> SharedResource:
        fields = self.mapping(value, where, _REPLICATED_RESOURCE)
        if "name" not in fields:
            raise self.fail(f"{where}.name", "required")
        name = self.resource_name(fields["name"], f"{where}.name")
        if "replicas" not in fields:
            raise self.fail(f"{where}.replicas", "required: an integer >= 2")
        replicas = fields["replicas"]
        if not _is_int(replicas):
            raise self.fail(f"{where}.replicas",
                            f"must be an integer >= 2, got {kind_of(replicas)}: {show(replicas)}")
        if replicas < 2:
            raise self.fail(f"{where}.replicas", f"must be >= 2, got {replicas}")
        if replicas > _GO_INT_MAX:
            raise self.fail(f"{where}.replicas", f"must be at most {_GO_INT_MAX} (the device "
                            f"plugin's integer), got a number of {len(str(replicas))} digits")
        if "rename" in fields and fields["rename"] != "":
            rename = self.resource_name(fields["rename"], f"{where}.rename")
            expected = f"{name}.shared" if rename_by_default else ""
            if rename != expected:
                effect = (f"renameByDefault: true renames it to {name}.shared"
                          if rename_by_default else "renameByDefault: false keeps its name")
                self.warn(f"{where}.rename",
                          f"custom renames are not supported; ignored ({effect})")
        if "devices" in fields:
            self.devices(fields["devices"], f"{where}.devices")
        return SharedResource(name=name, replicas=replicas)

    def devices(self, value: object, where: str) -> None:
        if isinstance(value, str):
            if value == "all":
                return
            raise self.fail(where, f"{_DEVICES_RULE}, got {show(value)}")
        if _is_int(value):
            assert isinstance(value, int)
            if value <= 0:
                raise self.fail(where, f"a count of devices must be > 0, got {value}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                ok = (_is_int(item) and item >= 0) or (isinstance(item, str)
                                                       and _is_device_ref(item))
                if not ok:
                    raise self.fail(f"{where}[{index}]",
                                    "must be a GPU index, a MIG index <gpu>:<mig>, or a GPU/MIG "
                                    f"UUID, got {show(item)}")
        else:
            raise self.fail(where, f"{_DEVICES_RULE}, got {kind_of(value)}: {show(value)}")
        self.warn(where, f"{show(value)} is treated as \"all\" (selecting devices is not "
                         "supported; ignored as GFD does)")

    def imex(self, value: object) -> None:
        imex = self.mapping(value, "imex", _IMEX)
        if "channelIDs" in imex:
            for index, item in enumerate(self.sequence(imex["channelIDs"], "imex.channelIDs")):
                if not (_is_int(item) and item >= 0):
                    raise self.fail(f"imex.channelIDs[{index}]",
                                    f"must be a non-negative integer, got {show(item)}")
        if "required" in imex:
            self.boolean(imex["required"], "imex.required")
