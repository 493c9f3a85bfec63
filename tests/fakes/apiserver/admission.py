"""Who may do what: the bearer token, RBAC-like rules that answer 403, and admission
rules that refuse one label value (as a validating admission policy)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ApiError, FieldError, _invalid
from .exchange import _flag, _Request, _Route
from .metadata import _section
from .objects import JSON, NODES, RESOURCES, VERBS, Resource
from .selectors import _selected_name
from .validation import _q


@dataclass(frozen=True)
class _Rule:
    verb: str
    resource: str
    name: str | None


def _bearer_matches(header: str | None, token: str) -> bool:
    """The Authorization header carries this bearer token; the scheme is case-insensitive
    (RFC 7235), as the API server reads it (in-cluster credentials send "bearer")."""
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and value == token


class AdmissionMixin:
    """Authorisation (``forbid``) and admission (``deny_label``) of each request. Uses
    ``_rules``, ``_denied`` and ``user``, made by ``FakeApiServer.__init__``."""

    # ------------------------------------------------------------------ authorisation

    def forbid(self, verb: str, resource: str, name: str | None = None) -> None:
        """Deny ``verb`` on ``resource`` (all names, or one) with 403 Forbidden."""
        if verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}")
        if resource not in RESOURCES:
            raise ValueError(f"unknown resource {resource!r}")
        with self._lock:
            self._rules.append(_Rule(verb, resource, name))

    def allow_all(self) -> None:
        with self._lock:
            self._rules.clear()

    def deny_label(self, key: str, value: str, *, message: str = "refused by policy") -> None:
        """An admission rule (a validating admission policy with reason Invalid, a webhook):
        a write that sets Node label ``key`` to ``value`` is a 422 Invalid naming the value,
        and nothing changes. ``allow_label`` lifts it."""
        with self._lock:
            self._denied[key] = f"{value}\0{message}"

    def allow_label(self, key: str) -> None:
        with self._lock:
            self._denied.pop(key, None)

    def _authorize(self, route: _Route, req: _Request, params: dict[str, str]) -> None:
        verb = route.verb
        if verb == "list" and _flag(req.query.get("watch")):
            verb = "watch"
        name = params.get("name")
        if name is None and verb in ("list", "watch"):
            name = _selected_name(req.query.get("fieldSelector", ""))
        res = route.resource
        for rule in self._rules:
            if rule.verb == verb and rule.resource == res.plural and rule.name in (None, name):
                break
        else:
            return
        ns = params.get("ns")
        scope = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        subject = f'{res.qualified} "{name}"' if name else res.qualified
        raise ApiError(
            403,
            "Forbidden",
            f'{subject} is forbidden: User "{self.user}" cannot {verb} resource '
            f'"{res.plural}" in API group "{res.group}" {scope}',
            res.details(name),
        )

    def _admit(self, res: Resource, old: JSON, new: JSON) -> None:
        """The ``deny_label`` rules: a write that sets a denied Node label value is a 422."""
        if res is not NODES:
            return
        before, after = _section(old, "labels"), _section(new, "labels")
        errors = []
        for key, rule in sorted(self._denied.items()):
            value, message = rule.split("\0", 1)
            if after.get(key) == value and before.get(key) != value:
                errors.append(FieldError("metadata.labels", "FieldValueInvalid", message,
                                         _q(value)))
        if errors:
            raise _invalid(res, new["metadata"]["name"], errors)

