"""CEL run as Kubernetes' DRA allocator runs it, on cel-python: parsed by its grammar, checked
against the DRA environment's declarations, interpreted with celops' and cellib's semantics
under a step budget; what is not mirrored exactly is "cannot tell"."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import lark
from celpy import celtypes as ct
from celpy.celparser import CELParseError, CELParser
from celpy.evaluation import Activation, CELEvalError, NameContainer, celstr
from celpy.evaluation import Evaluator as Interpreter

from gfd.fleet import cellib, celops
from gfd.fleet.model import Device, Version

MAX_DEPTH = 120
"""Levels of the parse tree (its rules of one operand left out) evaluated here: each costs a
few Python frames; 40 clauses joined by ``&&`` are 46 deep."""
ITERATION = 10
"""Steps charged for each element a macro visits, besides its expression's own (a nested
interpreter is set up for it)."""
DEVICE_FIELDS = ("driver", "attributes", "capacity", "allowMultipleAllocations")
"""The fields of ``kubernetes.DRADevice`` (``cel/compile.go``)."""
MACROS: dict[str, tuple[int, ...]] = {"all": (2,), "exists": (2,), "exists_one": (2,),
                                       "filter": (2,), "map": (2, 3)}
NAMESPACES = ("cel", "sets", "lists", "strings", "optional", "math", "base64", "url", "ip",
              "cidr", "format", "authorizer", "regex", "encoders")
"""Names before a namespaced function (``sets.contains``, ``cel.bind``): only ``cel.bind``
is evaluated."""
_CHAIN = frozenset({"expr", "conditionalor", "conditionaland", "relation", "addition",
                    "multiplication", "unary", "member"})
_PASS = frozenset({*_CHAIN, "primary", "paren_expr", "paren"})
_LITERAL_KIND = {"MLSTRING_LIT": "STRING_LIT"}


class NotCompiled(Exception):
    """The expression does not compile in the DRA environment (the API server refuses it,
    the allocator fails on it)."""


class TooDeep(Exception):
    pass


Tree = lark.Tree[Any]


def _unwrap(node: Any) -> Any:
    while isinstance(node, lark.Tree) and node.data in _PASS and len(node.children) == 1:
        node = node.children[0]
    return node


def _ident(node: Any) -> str | None:
    node = _unwrap(node)
    if isinstance(node, lark.Tree) and node.data == "ident":
        return str(node.children[0])
    return None


def _args(node: Tree, first: int) -> list[Any]:
    rest = node.children[first:]
    return list(rest[0].children) if rest and isinstance(rest[0], lark.Tree) else []


def collapse(tree: Tree) -> Tree:
    """The parse tree without its rules of one operand (an ``expr`` that is only a
    ``conditionalor``, ...), whose cel-python methods return that operand's value."""
    done: dict[int, Tree] = {}
    stack: list[tuple[Tree, bool]] = [(tree, False)]
    while stack:
        node, ready = stack.pop()
        if not ready:
            stack.append((node, True))
            stack.extend((c, False) for c in node.children if isinstance(c, lark.Tree))
            continue
        children = [done[id(c)] if isinstance(c, lark.Tree) else c for c in node.children]
        only = children[0] if len(children) == 1 and isinstance(children[0], lark.Tree) \
            else None
        if only is not None and (str(node.data) in _CHAIN or (str(node.data) == "primary"
                                 and str(only.data) == "literal")):
            done[id(node)] = only
        elif only is not None and str(node.data) == "primary" and str(only.data) == "paren":
            done[id(node)] = only.children[0]
        else:
            done[id(node)] = lark.Tree(node.data, children, node.meta)
        if str(node.data) == "paren_expr":
            done[id(node)] = lark.Tree("paren", children, node.meta)
    return done[id(tree)]


def depth(tree: Tree) -> int:
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            raise TooDeep
        stack.extend((c, level + 1) for c in node.children if isinstance(c, lark.Tree))
    return deepest


def check(node: Tree, scope: frozenset[str]) -> None:
    """Refuse what the DRA environment does not declare (``NotCompiled``) and what is not
    evaluated here (``celops.Unsupported``)."""
    data = node.data
    if data == "ident":
        name = str(node.children[0])
        if name == "device" and name not in scope:
            raise celops.Unsupported("device used other than through its fields is not "
                                     "evaluated here")
        if name not in scope:
            raise NotCompiled(f"undeclared reference to '{name}'")
        return
    if data == "member_dot":
        target, name = node.children[0], str(node.children[1])
        if _ident(target) == "device" and "device" not in scope:
            if name not in DEVICE_FIELDS:
                raise NotCompiled(f"undefined field '{name}'")
            return
        check(target, scope)
        return
    if data == "ident_arg":
        name, args = str(node.children[0]), _args(node, 1)
        if name == "has":
            inner = _unwrap(args[0]) if len(args) == 1 else None
            if not (isinstance(inner, lark.Tree) and inner.data == "member_dot"):
                raise NotCompiled("invalid argument to has() macro")
            if _ident(inner.children[0]) == "device" and "device" not in scope:
                raise celops.Unsupported("has() of a field of device is not evaluated here")
            check(inner.children[0], scope)
            return
        if name == "dyn" and len(args) == 1:
            pass
        elif len(args) not in cellib.GLOBAL_ARITY.get(name, ()):
            raise celops.Unsupported(f"function {name} is not evaluated here")
        for a in args:
            check(a, scope)
        return
    if data == "member_dot_arg":
        target, name, args = node.children[0], str(node.children[1]), _args(node, 2)
        space = _ident(target)
        if space in NAMESPACES and space not in scope:
            if (space, name, len(args)) != ("cel", "bind", 3):
                raise celops.Unsupported(f"function {space}.{name} is not evaluated here")
            var = _ident(args[0])
            if var is None:
                raise NotCompiled("cel.bind() variable name must be a simple identifier")
            check(args[1], scope)
            check(args[2], scope | {var})
            return
        if len(args) in MACROS.get(name, ()):
            var = _ident(args[0])
            if var is None:
                raise NotCompiled(f"{name}() variable name must be a simple identifier")
            check(target, scope)
            for a in args[1:]:
                check(a, scope | {var})
            return
        check(target, scope)
        if len(args) not in cellib.METHOD_ARITY.get(name, ()):
            raise celops.Unsupported(f"function {name} is not evaluated here")
        for a in args:
            check(a, scope)
        return
    if data in ("list_lit", "map_lit") and node.children:
        items = node.children[0].children
        for group in ((items,) if data == "list_lit" else (items[0::2], items[1::2])):
            kinds = {_LITERAL_KIND.get(t.type, t.type) for t in map(_token, group) if t}
            if len(kinds) > 1:
                raise NotCompiled("expected type of the aggregate literal's elements to be "
                                  "the same (HomogeneousAggregateLiterals)")
    if data in ("dot_ident", "dot_ident_arg", "member_object", "fieldinits"):
        raise celops.Unsupported("a qualified name or a message is not evaluated here")
    for child in node.children:
        if isinstance(child, lark.Tree):
            check(child, scope)


class Run(Interpreter):
    """cel-python's interpreter with field selection, ``has()``, the macros, ``cel.bind``
    and method calls as cel-go evaluates them, each node visited charged to a meter."""

    def __init__(self, ast: Tree, activation: Activation, meter: celops.Meter) -> None:
        super().__init__(ast, activation)
        self.meter = meter

    def sub_evaluator(self, ast: Tree) -> Run:
        return Run(ast, self.activation, self.meter)

    def _visit_tree(self, tree: Tree) -> Any:
        self.meter.spend(1)
        return super()._visit_tree(tree)

    def _value(self, ast: Any, bindings: dict[str, Any] | None = None) -> Any:
        """The value of a sub-expression, an error being a value."""
        if bindings is None:
            return self.visit(ast)
        try:
            return self.sub_evaluator(ast).evaluate(bindings)
        except CELEvalError as exc:
            return exc

    def member_dot(self, tree: Tree) -> Any:
        value = self.visit(tree.children[0])
        if isinstance(value, CELEvalError):
            return value
        if isinstance(value, NameContainer):
            raise celops.Unsupported("a qualified name is not evaluated here")
        return celops.select(value, str(tree.children[1]))

    def macro_has_eval(self, exprlist: Tree) -> Any:
        inner = _unwrap(exprlist.children[0])
        value = self.visit(inner.children[0])
        if isinstance(value, CELEvalError):
            return value
        return celops.has(value, str(inner.children[1]))

    def member_dot_arg(self, tree: Tree) -> Any:
        target, name, args = tree.children[0], str(tree.children[1]), _args(tree, 2)
        if name == "bind" and _ident(target) == "cel":
            var = str(_ident(args[0]))
            return self._value(args[2], {var: self._value(args[1])})
        if len(args) in MACROS.get(name, ()):
            return self._macro(name, target, args)
        receiver = self.visit(target)
        values = [self.visit(a) for a in args]
        for v in (receiver, *values):
            if isinstance(v, CELEvalError):
                return v
        function: Callable[..., Any] = self.activation.resolve_function(name)
        return function(receiver, *values)

    def mapinits(self, tree: Tree) -> Any:
        """A map literal: an error among its keys or values is the literal's value."""
        for value in (values := self.visit_children(tree)):
            if isinstance(value, CELEvalError):
                return value
        out: Any = ct.MapType()
        if len({type(key) for key in values[0::2]}) > 1:
            raise celops.Unsupported("a map literal with keys of several types is not "
                                     "evaluated here (the API server refuses it)")
        for key, value in zip(values[0::2], values[1::2], strict=True):
            if not isinstance(key, (ct.StringType, ct.IntType, ct.UintType, ct.BoolType)):
                return celops.error(f"unsupported key type: {celops.kind(key)}")
            if celops.find(out, key, real=True)[0]:
                return celops.error(f"Failed with repeated key: {key}")
            out[key] = value
        return out

    def _macro(self, name: str, target: Any, args: list[Any]) -> Any:
        source = self.visit(target)
        if isinstance(source, CELEvalError):
            return source
        if isinstance(source, ct.ListType):
            items = list(source)
        elif isinstance(source, ct.MapType):
            items = list(dict.keys(source))
            if name in ("map", "filter") and len(items) > 1:
                raise celops.Unsupported(f"{name}() over a map is not evaluated here (cel-go "
                                         "visits a map's keys in no fixed order)")
        else:
            return celops.error(f"expression of type '{celops.kind(source)}' cannot be "
                                "range of a comprehension")
        var = str(_ident(args[0]))

        def at(ast: Any, item: Any) -> Any:
            self.meter.spend(ITERATION)
            return self._value(ast, {var: item})

        if name in ("all", "exists"):
            step, stop = (celops.logical_and, False) if name == "all" \
                else (celops.logical_or, True)
            accu: Any = ct.BoolType(not stop)
            for item in items:
                accu = step(accu, at(args[1], item))
                if isinstance(accu, ct.BoolType) and bool(accu) is stop:
                    break
            return accu
        if name == "exists_one":
            count = 0
            for item in items:
                hit = at(args[1], item)
                if not isinstance(hit, ct.BoolType):
                    return hit if isinstance(hit, CELEvalError) else \
                        celops.no_overload("_?_:_", hit)
                count += bool(hit)
            return ct.BoolType(count == 1)
        out: list[Any] = []
        for item in items:
            if name == "filter" or len(args) == 3:
                keep = at(args[1], item)
                if not isinstance(keep, ct.BoolType):
                    return keep if isinstance(keep, CELEvalError) else \
                        celops.no_overload("_?_:_", keep)
                if not keep:
                    continue
            value = item if name == "filter" else at(args[-1], item)
            if isinstance(value, CELEvalError):
                return value
            out.append(value)
            self.meter.spend(1)
        return ct.ListType(out)


@dataclass(frozen=True, slots=True)
class Compiled:
    tree: Tree
    attributes: frozenset[tuple[str, str]] | None
    """The (domain, name) of every attribute the expression can read; None: it may read
    any (it ranges over a map, binds one, ...)."""
    capacity: frozenset[tuple[str, str]] | None

    def key(self, device: Device) -> tuple[Any, ...]:
        """What of ``device`` the outcome depends on (besides its version attributes being
        well formed, which the caller checks)."""
        out: list[Any] = [device.driver, device.allow_multiple]
        for wanted, have in ((self.attributes, device.attributes),
                             (self.capacity, device.capacity)):
            if wanted is None:
                out.append(tuple((k, type(v).__name__, v) for k, v in sorted(have.items())))
                continue
            for domain, name in sorted(wanted):
                for spelled in (f"{domain}/{name}", name if domain == device.driver else ""):
                    value = have.get(spelled)
                    out.append((type(value).__name__, value))
        return tuple(out)


def _token(node: Any) -> lark.Token | None:
    """A literal's token."""
    if isinstance(node, lark.Tree) and node.data == "literal" and \
            isinstance(node.children[0], lark.Token):
        return node.children[0]
    return None


def _literal(node: Any) -> str | None:
    token = node.children[0] if isinstance(node, lark.Tree) and node.data == "literal" \
        else None
    if isinstance(token, lark.Token) and token.type in ("STRING_LIT", "MLSTRING_LIT"):
        return str(celstr(token))
    return None


def _name(node: Any) -> str | None:
    """The name a ``.name`` or ``['name']`` selection takes, where ``node`` is one."""
    if isinstance(node, lark.Tree) and node.data == "member_dot":
        return str(node.children[1])
    if isinstance(node, lark.Tree) and node.data == "member_index":
        return _literal(node.children[1])
    return None


def reads(tree: Tree) -> dict[str, frozenset[tuple[str, str]] | None]:
    """For ``attributes`` and ``capacity``: the (domain, name) pairs the expression reads,
    None where it may read more (a map taken whole)."""
    found: dict[str, set[tuple[str, str]] | None] = {"attributes": set(), "capacity": set()}
    stack: list[tuple[Any, tuple[Any, ...]]] = [(tree, ())]
    while stack:
        node, parents = stack.pop()
        if not isinstance(node, lark.Tree):
            continue
        if node.data == "member_dot" and _ident(node.children[0]) == "device" and \
                str(node.children[1]) in found:
            field = str(node.children[1])
            up = [*reversed(parents)]
            domain = _name(up[0]) if len(up) > 0 and up[0].data == "member_index" \
                and up[0].children[0] is node else None
            name = _name(up[1]) if domain is not None and len(up) > 1 and \
                up[1].children[0] is up[0] else None
            wanted = found[field]
            if domain is None or name is None:
                found[field] = None
            elif wanted is not None:
                wanted.add((domain, name))
        stack.extend((c, (*parents, node)) for c in node.children)
    return {k: None if v is None else frozenset(v) for k, v in found.items()}


def parser() -> CELParser:
    """cel-python's parser (its grammar is built once a process, on the first)."""
    return CELParser()


def compile_expression(parser: CELParser, expression: str) -> Compiled | str:
    """The checked parse tree, or why the expression is not evaluated (one line)."""
    try:
        tree = parser.parse(expression)
    except CELParseError as exc:
        where = f" at line {exc.line}, column {exc.column}" if exc.line else ""
        return f"does not parse here: a syntax error{where}"
    try:
        tree = collapse(tree)
        depth(tree)
        check(tree, frozenset())
    except TooDeep:
        return "nested too deeply to evaluate here"
    except NotCompiled as exc:
        return f"does not compile: {exc}"
    except celops.Unsupported as exc:
        return _unsupported(exc)
    read = reads(tree)
    return Compiled(tree, read["attributes"], read["capacity"])


def _unsupported(exc: celops.Unsupported) -> str:
    text = str(exc)
    return text if "not evaluated here" in text else f"not evaluated here: {text}"


def bad_version(device: Device, parsed: dict[str, str]) -> str:
    """The runtime error ``DeviceMatches`` fails with on a version attribute that is not a
    semantic version, whatever the expression; "" when there is none. ``parsed`` keeps each
    version's answer."""
    for name, value in sorted(device.attributes.items()):
        if isinstance(value, Version):
            if value not in parsed:
                found = cellib.parse_semver(str(value))
                parsed[value] = found if isinstance(found, str) else ""
            if parsed[value]:
                return f"attribute {name}: parse semantic version: {parsed[value]}"
    return ""


def device_value(device: Device) -> Any:
    """The ``device`` variable as ``DeviceMatches`` builds it (its version attributes well
    formed: ``bad_version``)."""
    attributes: dict[Any, Any] = {}
    for name, value in sorted(device.attributes.items()):
        domain, sep, ident = name.partition("/")
        if not sep:
            domain, ident = device.driver, name
        cel: Any
        if isinstance(value, Version):
            cel = cellib.parse_semver(str(value))
        elif isinstance(value, bool):
            cel = ct.BoolType(value)
        elif isinstance(value, int):
            cel = ct.IntType(value)
        else:
            cel = ct.StringType(value)
        attributes.setdefault(ct.StringType(domain), ct.MapType())[ct.StringType(ident)] = cel
    capacity: dict[Any, Any] = {}
    for name, amount in sorted(device.capacity.items()):
        domain, sep, ident = name.partition("/")
        if not sep:
            domain, ident = device.driver, name
        capacity.setdefault(ct.StringType(domain), ct.MapType())[ct.StringType(ident)] = \
            celops.Quantity(Fraction(amount))
    return ct.MapType({
        ct.StringType("driver"): ct.StringType(device.driver),
        ct.StringType("allowMultipleAllocations"): ct.BoolType(device.allow_multiple),
        ct.StringType("attributes"): celops.DomainMap(attributes),
        ct.StringType("capacity"): celops.DomainMap(capacity),
    })


def run(compiled: Compiled, device: Any, *, patterns: cellib.Patterns,
        budget: int) -> tuple[bool | None, str]:
    """(matched, why not) for a device value of ``device_value``."""
    meter = celops.Meter(budget)
    activation = Activation(functions=cellib.table(meter, patterns),
                            vars={"device": device})
    try:
        result = Run(compiled.tree, activation, meter).evaluate()
    except CELEvalError as exc:
        return None, f"CEL runtime error: {exc.args[0] if exc.args else exc}"
    except celops.Exhausted:
        return None, (f"too costly to evaluate here (over {budget} steps; the allocator "
                      "allows 1,000,000 cost units)")
    except celops.Unsupported as exc:
        return None, _unsupported(exc)
    except RecursionError:
        return None, "nested too deeply to evaluate here"
    if not isinstance(result, ct.BoolType):
        return None, (f"CEL runtime error: the result is of type {celops.kind(result)}, "
                      "not bool")
    return bool(result), ""
