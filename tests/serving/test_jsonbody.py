"""serving/jsonbody: the one strict JSON decoder of the webhook's reviews and the extender's requests."""

from __future__ import annotations

import pytest

from webhook.serving import jsonbody


def test_strict_json_decodes_and_encodes_compactly():
    assert jsonbody.decode(b'{"a": [1, "x", null]}') == {"a": [1, "x", None]}
    assert jsonbody.encode({"a": [1, "x", None]}) == b'{"a":[1,"x",null]}'


@pytest.mark.parametrize("body", [b"{nope", b"[NaN]", b"[Infinity]", b"-Infinity", b'"\\ud800"', b"\xff"])
def test_what_go_never_writes_is_a_decode_error_saying_where(body):
    with pytest.raises(jsonbody.DecodeError, match="line 1 column"):
        jsonbody.decode(body)


def test_nesting_past_the_limit_is_too_deep_whichever_decoder_meets_it():
    with pytest.raises(jsonbody.TooDeep):
        jsonbody.decode(b"[" * 5000 + b"]" * 5000)
    # A number past the double range sends the body to the stdlib decoder; its recursion limit is the
    # same refusal.
    with pytest.raises(jsonbody.TooDeep):
        jsonbody.decode(b"[1e999, " + b"[" * 5000 + b"]" * 5000 + b"]")


def test_numbers_past_64_bits_read_as_floats_and_past_doubles_as_infinity():
    assert jsonbody.decode(b"[18446744073709551616]") == [1.8446744073709552e19]
    assert jsonbody.decode(b"[1e999]") == [float("inf")]
    assert jsonbody.decode(b"[" + b"9" * 5000 + b"]") == [float("inf")]
