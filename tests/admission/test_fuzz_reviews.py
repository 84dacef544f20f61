"""Property: whatever a review holds, the webhook answers 200 (a valid AdmissionReview) or a JSON 400,
within a bounded size, and logs no traceback.

Hypothesis edits realistic reviews (any JSON value at any place, keys the rules read) and splices in what
JSON parsers disagree on (NaN, huge numbers, lone surrogates). CI runs a few thousand cases;
`bench/admission_fuzz.py` runs 100,000 and more (GPUSHARE_FUZZ_EXAMPLES, GPUSHARE_FUZZ_SEED).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.admission import asgi, samples
from tests.admission import test_fuzz as fuzz
from webhook.serving import jsonbody

EXAMPLES = int(os.environ.get("GPUSHARE_FUZZ_EXAMPLES", "2000"))
SEED = os.environ.get("GPUSHARE_FUZZ_SEED")  # unset: the same cases every CI run
MAX_ANSWER_BYTES = 32 * 1024  # an 8 KiB message, 20 warnings of 120 characters, a small patch
OPERATIONS = ["CREATE", "CREATE", "CREATE", "UPDATE", "UPDATE", "DELETE", "CONNECT"]
SPLICES = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"9" * 5000,
    b"-" + b"9" * 30,
    b'"\\ud800"',
    b'"\\udfff\\ud800"',
    b'"\\u0000"',
    b"18446744073709551616",
]
APP = asgi.webhook_app()

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from([a for a in fuzz.ATOMS if isinstance(a, str)])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(fuzz.KEYS) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)


def rarely(one_in: int) -> st.SearchStrategy[bool]:
    """True about once in `one_in` draws (st.integers favours its bounds, so `== 0` is not that)."""
    return st.sampled_from([False] * (one_in - 1) + [True])


@st.composite
def reviews(draw: st.DrawFn) -> bytes:
    obj = copy.deepcopy(draw(st.sampled_from(fuzz.SEEDS)))
    operation = draw(st.sampled_from(OPERATIONS))
    body: Any = samples.review(
        None if operation in ("DELETE", "CONNECT") else obj,
        operation=operation,
        old=copy.deepcopy(obj) if operation == "UPDATE" else None,
        kind=obj["kind"],
        uid="fuzz",
    )
    inside = body["request"]["object"]  # captured before edits may take it out of the envelope
    for _ in range(draw(st.integers(0, 4))):
        # Mostly inside the object, where the rules look; sometimes the envelope (a 400).
        nodes = fuzz.containers(body if inside is None or draw(rarely(5)) else inside)
        node = nodes[draw(st.integers(0, len(nodes) - 1))]
        if isinstance(node, dict):
            key = draw(st.sampled_from(sorted(node) + fuzz.KEYS))
            if key in node and draw(st.booleans()):
                del node[key]
            else:
                node[key] = draw(values)
        elif node and draw(st.booleans()):
            node[draw(st.integers(0, len(node) - 1))] = draw(values)
        else:
            node.append(draw(values))
    if draw(rarely(50)):
        body = draw(values)  # not even an object
    raw = json.dumps(body).encode()
    if draw(rarely(10)):  # splice over one value: the first after a chosen key
        key = b'"' + draw(st.sampled_from(fuzz.KEYS)).encode() + b'": '
        at = raw.find(key)
        if at >= 0:
            start = at + len(key)
            end = min((i for i in (raw.find(b",", start), raw.find(b"}", start)) if i >= 0), default=len(raw))
            raw = raw[:start] + draw(st.sampled_from(SPLICES)) + raw[end:]
    return raw


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=SEED is None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(raw=reviews(), path=st.sampled_from(["/validate", "/mutate"]))
def test_any_review_gets_a_200_or_a_400_never_a_500_nor_a_traceback(raw, path):
    try:
        sent = jsonbody.decode(raw)
    except jsonbody.DecodeError:
        sent = None
    tracebacks = asgi.Tracebacks()
    root = logging.getLogger()
    root.addHandler(tracebacks)
    try:
        status, out = asyncio.run(asgi.post(APP, path, raw))
    finally:
        root.removeHandler(tracebacks)
    assert not tracebacks.records, [r.getMessage() for r in tracebacks.records]
    assert len(out) <= MAX_ANSWER_BYTES
    payload = json.loads(out)
    event(f"{status} {payload['response'].get('allowed') if status == 200 else payload['error'][:40]}")
    if sent is None:
        assert status == 400, payload
    fuzz.check_response(path.strip("/"), sent, status, payload)
