"""The device-plugin config file (v1): the same YAML/JSON file NVIDIA's device plugin reads.

One ConfigMap serves both daemons (docs/gfd-compatibility.md, "Config file"). This module
turns the file into ``FileConfig``: the settings it sets (keyed by ``gfd.config.Settings``
field names, so ``gfd.config.resolve`` can apply GFD's precedence), the normalised sharing
section, and warnings. Which ``flags`` fields exist, and how each value is checked, comes
from the settings table (``gfd.config``); the device plugin's own fields, which gfd checks
and ignores, are listed here. A running agent re-reads the file through
``gfd.configsource.ConfigSource`` and watches it through ``gfd.configwatch.ConfigWatch``.

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
import re
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import yaml

from gfd.config import TABLE, Entry
from gfd.errors import ConfigError, one_line, show
from gfd.hostfile import FileProblem, read_bytes
from gfd.settingkinds import Bool, Kind, PathKind, ValueProblem, kind_of
from gfd.sharing import SharedResource, Sharing

log = logging.getLogger(__name__)

VERSION = "v1"
RESOURCE_PREFIX = "nvidia.com"
MAX_RESOURCE_NAME_LENGTH = 63
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
    raw = read_config_bytes(path)
    return parse_bytes(raw, path=path, digest=hashlib.sha256(raw).hexdigest())


def parse_config(text: str, *, path: str) -> FileConfig:
    """Parse config-file text (no I/O); ``path`` only names the file in messages."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return _Parser(path).parse(text, digest=digest)


# --- reading ---------------------------------------------------------------------------


def file_label(path: str) -> str:
    """How messages name the config file at ``path``."""
    shown = path if path.isprintable() else repr(path)
    return f"config file {shown}"


def read_config_bytes(path: str) -> bytes:
    """The file's bytes; ConfigError (one line) when it cannot be read as a config file."""
    where = file_label(path)
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


def parse_bytes(raw: bytes, *, path: str, digest: str) -> FileConfig:
    """Parse the file's raw bytes (UTF-8) read from ``path``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file_label(path)}: not valid UTF-8 text (byte {exc.start})") from None
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
        self.where = file_label(path)
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
