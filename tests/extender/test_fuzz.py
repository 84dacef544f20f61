"""Fuzzing the extender over HTTP: any body on filter, prioritize or bind gets an answer, never a 500.

Filter and bind answer 200 with `Error` (the extender contract), prioritize 200 or 400 with `Error`;
nothing is logged as an exception. CI runs a few thousand cases; `bench/extender_fuzz.py` runs
`fuzz(..., examples=100_000)` as a soak.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.extender.factory import FakeApi, node, pod
from webhook.core.wire import resources
from webhook.extender import app as app_mod
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import Cache
from webhook.extender.settings import ExtenderSettings
from webhook.serving.server import AppServer, ServeOptions

PREFIX = "/gpushare-scheduler"
CI_EXAMPLES = 2000
VERBS = ("filter", "prioritize", "bind")
FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}

Post = Callable[[str, bytes], httpx.Response]

_KEYS = st.sampled_from(
    [
        "Pod", "pod", "Nodes", "NodeNames", "nodenames", "PodName", "PodNamespace", "PodUID", "Node",
        "metadata", "spec", "status", "items", "name", "namespace", "labels", "annotations", "containers",
        "initContainers", "resources", "limits", "requests", "env", "nodeName", resources.GPU_MEMORY,
        resources.GPU_COUNT, resources.NVIDIA_GPU, "nvidia.com/gpus", resources.PLACEMENT_POLICY_ANNOTATION,
        resources.NODE_DEVICES_ANNOTATION, resources.ANN_MEM_IDX, "",
    ]
)  # fmt: skip
_QUANTITIES = st.sampled_from(
    ["3", "3Gi", "3G", "3072Mi", "0.5", "1500m", "-1", "1e3", "9" * 40, "99999Ei", "x", "", " 4 ", "NaN"]
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _QUANTITIES
    | st.text(max_size=12)
)
JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=25,
)


def _container(resources_value: Any, name: Any) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": resources_value}


_RESOURCES = st.dictionaries(
    st.sampled_from(["limits", "requests"]),
    st.dictionaries(
        st.sampled_from(
            [resources.GPU_MEMORY, resources.GPU_COUNT, resources.NVIDIA_GPU, "cpu", "aliyun.com/gpumem"]
        ),
        _QUANTITIES | _SCALARS,
        max_size=3,
    )
    | JSON,
    max_size=2,
)
_PODS = st.builds(
    lambda containers, labels, annotations: {
        "metadata": {"name": "p", "namespace": "default", "labels": labels, "annotations": annotations},
        "spec": {"containers": containers},
    },
    st.lists(st.builds(_container, _RESOURCES | JSON, st.text(max_size=8) | JSON), max_size=3) | JSON,
    st.dictionaries(st.just(resources.GPU_COUNT_LABEL), _QUANTITIES | _SCALARS) | JSON,
    st.dictionaries(st.just(resources.PLACEMENT_POLICY_ANNOTATION), st.sampled_from(["spread", "x"])) | JSON,
)
_NAMES = st.lists(st.sampled_from(["n1", "n2", "ghost", ""]), max_size=4)


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    """A well-formed ExtenderArgs or ExtenderBindingArgs with one part replaced by any JSON."""
    args: dict[str, Any] = {
        "Pod": draw(_PODS | st.just(pod("a", 5)) | st.just(pod("x", 5, gpu_count=2))),
        "NodeNames": draw(_NAMES),
        "Nodes": None,
    }
    if draw(st.booleans()):
        args["Nodes"] = {"items": [node(n, 16, 8) for n in draw(_NAMES) if n], "metadata": {}}
        args["NodeNames"] = None
    if draw(st.booleans()):
        args = {"PodName": "a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "n1"}
    key = draw(st.sampled_from([*args, "extra"]))
    if draw(st.booleans()):
        args[key] = draw(JSON)
    return json.dumps(args).encode()


@st.composite
def _deep(draw: st.DrawFn) -> bytes:
    """Nesting past the decoder's stack, or just under it inside a Node that filter echoes back."""
    depth = draw(st.integers(1, 5_000))
    nested = b"[" * depth + b"]" * depth
    where = draw(
        st.sampled_from([b'{"Pod": %s}', b'{"Pod": {}, "NodeNames": %s}', b"%s", b'{"PodName": %s}'])
    )
    if draw(st.booleans()):
        where = b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "n1"}, "x": %s}]}}'
    return where % nested


# More digits than Python converts by default (4300), where JSON would put a quantity.
HUGE_INT_POD = (
    b'{"Pod": {"spec": {"containers": [{"name": "c", "resources": {"limits": {"aliyun.com/gpu-mem": '
    + b"9" * 5000
    + b'}}}]}}, "NodeNames": ["n1"]}'
)
CASES = st.tuples(
    st.sampled_from(VERBS),
    _mutated()  # listed three times: most cases should reach the scheduling code, not the JSON decoder
    | _mutated()
    | _mutated()
    | _deep()
    | JSON.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=64)
    | st.sampled_from(
        [b"", b"null", b'{"Pod": NaN}', b"[Infinity]", b"\xff\xfe", b'{"Pod": {"spec": 1e999}}']
    )
    | st.sampled_from([HUGE_INT_POD, HUGE_INT_POD.replace(b"9" * 5000, b"9" * 4000)]),
)


def check_reply(verb: str, response: httpx.Response) -> str:
    """Assert the contract for one reply; the outcome, for counting."""
    assert response.status_code != 500, response.text
    body = _loads(response.content)
    if verb == "prioritize":
        assert response.status_code in (200, 400), response.text
        if response.status_code == 400:
            assert body["Error"]
            return "prioritize 400"
        assert all(set(h) == {"Host", "Score"} for h in body)
        return "prioritize scores"
    assert response.status_code == 200, response.text
    if verb == "bind":
        assert set(body) == {"Error"}
        return "bind error" if body["Error"] else "bind ok"
    assert set(body) == FILTER_KEYS
    return "filter error" if body["Error"] else "filter result"


def _loads(content: bytes) -> Any:
    """The reply's JSON. A reply echoing Nodes nested as deep as the server thread could decode them
    overflows the decoder deep in hypothesis' stack: such a one is decoded on a fresh thread."""
    try:
        return json.loads(content)
    except RecursionError:
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(json.loads, content).result()


class _Errors(logging.Handler):
    """Counts log records of ERROR and above: a logged exception is a traceback, which we do not want."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def serve() -> Iterator[Post]:
    """The extender on a real socket with a small cluster in its cache; yields `post(verb, body)`."""
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([node("n1", 16, 8), node("n2", 4)])
    pending = [pod("a", 5), pod("x", 5, gpu_count=2)]
    for p in pending:
        api.add(p)
    cache.pods_resync(pending)
    ext_settings = ExtenderSettings(max_body_bytes=64 * 1024)
    ext = app_mod.ExtenderApp(cache, Binder(cache, api, ext_settings, sleep=lambda s: None), ext_settings)
    server = AppServer(app_mod.build_app(ext), ServeOptions(host="127.0.0.1", port=0), ext.readiness)
    headers = {"Content-Type": "application/json"}
    with server, httpx.Client(base_url=server.url, timeout=10) as client:
        yield lambda verb, body: client.post(f"{PREFIX}/{verb}", content=body, headers=headers)


def fuzz(post: Post, examples: int) -> Counter[str]:
    """Send `examples` hypothesis cases; every reply is checked, none may log an error. Outcome counts."""
    counts: Counter[str] = Counter()
    errors = _Errors()
    logging.getLogger("webhook").addHandler(errors)

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=CASES)
    def one(case: tuple[str, bytes]) -> None:
        verb, body = case
        counts[check_reply(verb, post(verb, body))] += 1
        assert not errors.records, errors.records[0].getMessage()

    try:
        one()
    finally:
        logging.getLogger("webhook").removeHandler(errors)
    return counts


@pytest.fixture(scope="module")
def post() -> Iterator[Post]:
    yield from serve()


def test_no_body_on_any_verb_gets_a_500_or_logs_a_traceback(post):
    counts = fuzz(post, CI_EXAMPLES)
    # Every verb and both kinds of answer were reached, so the cases are not all refused at the door.
    assert {"filter result", "filter error", "prioritize scores", "prioritize 400", "bind error"} <= set(
        counts
    )


@pytest.mark.parametrize(
    ("verb", "body", "fragment"),
    [
        ("filter", b'{"Pod": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
        ("filter", b'{"Pod": {"metadata": "x"}, "NodeNames": ["n1"]}', "metadata: has the wrong type"),
        (
            "filter",
            b'{"Pod": {"spec": {"containers": 3}}, "NodeNames": ["n1"]}',
            'spec.containers: "3": has the',
        ),
        (
            "filter",
            b'{"Pod": {"metadata": {"annotations": []}, "spec": {"containers": [{"name": "c", "resources": '
            b'{"limits": {"aliyun.com/gpu-mem": 2}}}]}}, "NodeNames": ["n1"]}',
            '"NodeNames": ["n1"]',
        ),
        (
            "filter",
            b'{"Pod": {"spec": {"containers": [{"name": "c", "resources": {"limits": {"aliyun.com/gpu-mem": '
            b'"3Gi"}}}]}}, "NodeNames": ["n1"]}',
            "fix: write 3; the unit is GiB",
        ),
        (
            "filter",
            HUGE_INT_POD,
            'limits[aliyun.com/gpu-mem] (container "c"): "inf": is not a valid quantity',
        ),
        (
            "filter",
            b'{"Pod": {"spec": {"containers": [{"name": "c", "resources": {"limits": '
            b'{"aliyun.com/gpu-mem": 2}}}], "initContainers": true}}, "NodeNames": ["n1"]}',
            'spec.initContainers: "true": has the wrong type: expected a list of containers',
        ),
        (
            "filter",
            b'{"Pod": {"metadata": {"labels": 3}, "spec": {"containers": [{"name": "c", "resources": '
            b'{"limits": {"aliyun.com/gpu-mem": 2}}}]}}, "NodeNames": ["n1"]}',
            'metadata.labels: "3": has the wrong type',
        ),
        (
            "bind",
            b'{"PodName": "\\ud800", "PodNamespace": "default", "PodUID": "x", "Node": "n1"}',
            "request body is not JSON: no low surrogate in string",
        ),
        ("bind", b'{"PodName": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested too deeply"),
        ("prioritize", b'{"Pod": {}, "NodeNames": NaN}', "request body is not JSON: unexpected character"),
    ],
    ids=[
        "deep-pod",
        "metadata-string",
        "containers-number",
        "annotations-list",
        "unit-suffix",
        "huge-integer",
        "init-containers-true",
        "labels-number",
        "lone-surrogate",
        "deep-bind",
        "nan",
    ],
)
def test_malformed_shapes_name_the_field(post, verb, body, fragment):
    r = post(verb, body)
    assert r.status_code == (400 if verb == "prioritize" else 200)
    reply = r.json()
    reasons = " ".join((reply.get("FailedAndUnresolvableNodes") or {}).values())
    text = reply.get("Error") or reasons or json.dumps(reply)
    assert fragment in text
