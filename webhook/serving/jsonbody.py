"""JSON request bodies <-> Python values, with orjson (~3-10x the stdlib's speed): the webhook's reviews
and the extender's ExtenderArgs and BindingArgs.

    decode(b'{"a": 1}') -> {"a": 1}         DecodeError("...") for anything that is not strict JSON
    encode({"a": 1})   -> b'{"a":1}'

Strict: NaN/Infinity literals, invalid UTF-8 and lone surrogates are errors (the API server and
kube-scheduler, written in Go, never send them); nesting past 1,024 levels is TooDeep. Numbers beyond the
64-bit range are not errors: orjson reads them as floats, and one past the double range (or 4,300 digits,
the stdlib's int limit) reads as +-infinity, so a body that holds one still gets an answer; a GPU field
holding it is then refused for its value like any other number.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from webhook.core.wire import jsonnumbers


class DecodeError(ValueError):
    """The body is not strict JSON; the message says where, e.g. `unexpected character: line 1 ...`."""


class TooDeep(DecodeError):
    """Nested deeper than any Kubernetes object is (orjson's limit, 1,024 levels)."""


def decode(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        text = str(exc)
        if text.startswith("depth limit"):
            raise TooDeep(_first_line(exc)) from None
        if "number" not in text:  # orjson's only refusal of valid JSON: a number out of range
            raise DecodeError(_first_line(exc)) from None
    return _decode_wide_numbers(body)


def _decode_wide_numbers(body: bytes) -> Any:
    """The stdlib reads what orjson refuses for range alone; the result is held to orjson's rules."""
    try:
        value = json.loads(body, parse_int=jsonnumbers.read_int, parse_constant=jsonnumbers.refuse_constant)
        orjson.dumps(value)  # lone surrogates: the one thing the stdlib lets through and orjson does not
    except RecursionError as exc:
        raise TooDeep(_first_line(exc)) from None
    except (ValueError, orjson.JSONEncodeError) as exc:
        raise DecodeError(_first_line(exc)) from None
    return value


def encode(value: Any) -> bytes:
    return orjson.dumps(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
