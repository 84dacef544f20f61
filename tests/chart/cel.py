"""A tiny CEL evaluator for the subset the chart's matchConditions use (cel-python is not installed).

Supported: `||`, `&&`, `!`, `in` (list or map keys), `has(a.b)`, field selection, `.exists(v, e)` over lists
and map keys, `.startsWith(s)`, string and list literals, parentheses. Anything else raises CelError, so
the expression cannot silently grow past what this checks. Semantics follow cel-go: `has()` on a missing
map key is false, selecting a missing field is an error (which fails the test).
"""

from __future__ import annotations

import re
from typing import Any

TOKEN = re.compile(r"\s*(?:(\|\||&&|[()\[\],.!])|'((?:[^'\\]|\\.)*)'|([A-Za-z_][A-Za-z0-9_]*))")


class CelError(Exception):
    pass


def evaluate(expression: str, variables: dict[str, Any]) -> Any:
    parser = _Parser(expression)
    tree = parser.parse_or()
    if parser.peek() is not None:
        raise CelError(f"unexpected {parser.peek()!r}")
    return _eval(tree, variables)


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text.rstrip()):
            m = TOKEN.match(text, pos)
            if not m:
                raise CelError(f"cannot tokenize at {text[pos : pos + 20]!r}")
            op, string, ident = m.groups()
            self.tokens.append(("op", op) if op else ("str", string) if string is not None else ("id", ident))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise CelError(f"expected {value!r}, got {tok!r}")
        self.i += 1
        return tok

    def parse_or(self) -> Any:
        node = self.parse_and()
        while self.peek() == ("op", "||"):
            self.take()
            node = ("or", node, self.parse_and())
        return node

    def parse_and(self) -> Any:
        node = self.parse_in()
        while self.peek() == ("op", "&&"):
            self.take()
            node = ("and", node, self.parse_in())
        return node

    def parse_in(self) -> Any:
        node = self.parse_unary()
        if self.peek() == ("id", "in"):
            self.take()
            node = ("in", node, self.parse_unary())
        return node

    def parse_unary(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return ("not", self.parse_unary())
        return self.parse_postfix()

    def parse_postfix(self) -> Any:
        node = self.parse_primary()
        while self.peek() == ("op", "."):
            self.take()
            name = self.take()[1]
            if self.peek() == ("op", "("):
                self.take()
                if name == "exists":
                    var = self.take()[1]
                    self.take(",")
                    node = ("exists", node, var, self.parse_or())
                elif name == "startsWith":
                    node = ("startsWith", node, self.parse_or())
                else:
                    raise CelError(f"unsupported method {name}")
                self.take(")")
            else:
                node = ("select", node, name)
        return node

    def parse_primary(self) -> Any:
        kind, value = self.take()
        if kind == "str":
            return ("lit", value)
        if value == "(":
            node = self.parse_or()
            self.take(")")
            return node
        if value == "[":
            items = []
            while self.peek() != ("op", "]"):
                items.append(self.parse_or())
                if self.peek() == ("op", ","):
                    self.take()
            self.take("]")
            return ("list", items)
        if kind == "id" and value == "has":
            self.take("(")
            arg = self.parse_postfix()
            self.take(")")
            if arg[0] != "select":
                raise CelError("has() needs a field selection")
            return ("has", arg)
        if kind == "id":
            return ("var", value)
        raise CelError(f"unexpected {value!r}")


def _eval(node: Any, env: dict[str, Any]) -> Any:
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "var":
        if node[1] not in env:
            raise CelError(f"undeclared reference to {node[1]!r}")
        return env[node[1]]
    if op == "list":
        return [_eval(n, env) for n in node[1]]
    if op == "select":
        target = _eval(node[1], env)
        if not isinstance(target, dict) or node[2] not in target:
            raise CelError(f"no such key: {node[2]}")
        return target[node[2]]
    if op == "has":
        target = _eval(node[1][1], env)
        return isinstance(target, dict) and node[1][2] in target
    if op in ("and", "or"):
        left = _bool(_eval(node[1], env))
        if (op == "and" and not left) or (op == "or" and left):
            return left
        return _bool(_eval(node[2], env))
    if op == "not":
        return not _bool(_eval(node[1], env))
    if op == "in":
        return _eval(node[1], env) in _eval(node[2], env)
    if op == "exists":
        items = _eval(node[1], env)
        if not isinstance(items, list | dict):
            raise CelError("exists() needs a list or map")
        return any(_bool(_eval(node[3], {**env, node[2]: item})) for item in items)
    if op == "startsWith":
        return str(_eval(node[1], env)).startswith(_eval(node[2], env))
    raise CelError(f"unknown node {op}")


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise CelError(f"expected bool, got {type(value).__name__}")
    return value
