"""Fuzz: thousands of random and mutated AdmissionReviews never give a 5xx or an invalid response.

In process through the ASGI app (fast), plus a smaller batch over real HTTPS.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import random
from typing import Any

import httpx
import jsonpatch

from tests.admission import samples
from tests.admission.conftest import Webhook
from webhook.admission import app, settings

SEEDS = [
    samples.pod(samples.pod_spec(samples.container(limits={"aliyun.com/gpu-mem": "4"}))),
    samples.pod(samples.pod_spec(samples.container(limits={"nvidia.com/gpu": "0.5"}))),
    samples.pod(
        samples.pod_spec(
            samples.container(
                "a", limits={"aliyun.com/gpu-mem": "3"}, env=[{"name": "CGPU_DISABLE", "value": "true"}]
            ),
            samples.container("b", limits={"aliyun.com/gpu-mem": "1", "nvidia.com/gpu": "1"}),
            node_selector={"zone": "a"},
        ),
        annotations={"cgpu.disable.isolation": "TRUE"},
        labels={"aliyun.com/gpu-count": "2"},
    ),
    *(samples.workload(kind, samples.pod_spec()) for kind in samples.WORKLOADS),
]
ATOMS: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    10**30,
    "",
    "1",
    "0.5",
    "-2",
    "1e3",
    "1Ki",
    "x" * 300,
    "a\nb\x00",
    "TRUE",
    "nvidia.com/gpu",
    "~1/~0",
    [],
    {},
    [None],
    {"a": None},
]
KEYS = [
    "spec",
    "containers",
    "resources",
    "limits",
    "requests",
    "metadata",
    "annotations",
    "labels",
    "env",
    "nodeSelector",
    "template",
    "initContainers",
    "aliyun.com/gpu-mem",
    "nvidia.com/gpu",
    "name",
    "value",
    "kind",
    "operation",
    "uid",
    "object",
    "request",
    "apiVersion",
    "valueFrom",
    "affinity",
    "schedulerName",
]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.6:
        return copy.deepcopy(rng.choice(ATOMS))  # a fresh [] or {}: a shared one could be made cyclic
    if roll < 0.8:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(KEYS): random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def containers(node: Any) -> list[Any]:
    """Every dict and list inside `node` (mutation targets)."""
    out: list[Any] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict | list):
            out.append(item)
            stack.extend(item.values() if isinstance(item, dict) else item)
    return out


def mutate(rng: random.Random, body: dict[str, Any]) -> Any:
    for _ in range(rng.randint(1, 4)):
        targets = containers(body)
        target = rng.choice(targets)
        action = rng.random()
        if isinstance(target, dict):
            if target and action < 0.3:
                del target[rng.choice(list(target))]
            elif target and action < 0.8:
                target[rng.choice(list(target))] = random_value(rng)
            else:
                target[rng.choice(KEYS)] = random_value(rng)
        elif target and action < 0.5:
            target[rng.randrange(len(target))] = random_value(rng)
        elif action < 0.8:
            target.append(random_value(rng))
        elif target:
            target.pop()
    if rng.random() < 0.02:
        return random_value(rng)
    return body


def make_case(rng: random.Random, endpoint: str) -> tuple[bytes, Any]:
    """(request body bytes, the parsed body or None when the bytes are not JSON)."""
    roll = rng.random()
    if roll < 0.03:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))), None
    obj = copy.deepcopy(rng.choice(SEEDS))
    operation = rng.choice(["CREATE", "CREATE", "UPDATE", "DELETE", "CONNECT"])
    body = samples.review(
        None if operation in ("DELETE", "CONNECT") else obj,
        operation=operation,
        old=obj if operation == "UPDATE" else None,
        kind=obj["kind"],
        uid=f"fuzz-{rng.randrange(10**9)}",
    )
    if roll < 0.9:
        body = mutate(rng, body)
    raw = json.dumps(body).encode()
    if rng.random() < 0.03:
        raw = raw[: rng.randrange(len(raw) + 1)]
    try:
        return raw, json.loads(raw)
    except ValueError:
        return raw, None


def check_response(endpoint: str, sent: Any, status: int, payload: Any) -> None:
    assert status in (200, 400), (status, payload)
    if status == 400:
        assert isinstance(payload.get("error"), str) and payload["error"]
        return
    assert payload["apiVersion"] == "admission.k8s.io/v1"
    assert payload["kind"] == "AdmissionReview"
    response = payload["response"]
    assert response["uid"] == sent["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    assert set(response) <= {"uid", "allowed", "status", "patch", "patchType", "warnings"}
    if response["allowed"]:
        assert "status" not in response
    else:
        assert response["status"]["code"] == 403 and response["status"]["reason"] == "Forbidden"
        assert isinstance(response["status"]["message"], str) and response["status"]["message"]
        assert "patch" not in response
    assert ("patch" in response) == ("patchType" in response)
    if "patch" in response:
        assert endpoint == "mutate" and response["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(response["patch"], validate=True))
        assert isinstance(ops, list) and ops
        jsonpatch.apply_patch(sent["request"]["object"], ops)  # must apply to the object we were sent
    for warning in response.get("warnings", []):
        assert isinstance(warning, str) and 0 < len(warning) <= 120
        assert warning.isprintable()


async def fuzz_in_process(count: int, seed: int) -> int:
    rng = random.Random(seed)
    asgi = app.create_app(settings.build())
    allowed = 0
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=asgi), base_url="http://webhook"
    ) as client:
        for _ in range(count):
            endpoint = rng.choice(["mutate", "validate"])
            raw, sent = make_case(rng, endpoint)
            response = await client.post(
                f"/{endpoint}?timeout=10s", content=raw, headers={"content-type": "application/json"}
            )
            check_response(endpoint, sent, response.status_code, response.json())
            allowed += response.status_code == 200
    return allowed


def test_thousands_of_random_reviews_in_process_never_break_the_contract():
    answered = asyncio.run(fuzz_in_process(5000, seed=20260101))
    # The fuzz must reach the rules, not only the envelope checks.
    assert answered > 2000


def test_a_batch_of_random_reviews_over_https_never_breaks_the_contract(webhook: Webhook):
    rng = random.Random(7)
    for _ in range(300):
        endpoint = rng.choice(["mutate", "validate"])
        raw, sent = make_case(rng, endpoint)
        response = webhook.client.post(
            f"/{endpoint}", content=raw, headers={"content-type": "application/json"}
        )
        check_response(endpoint, sent, response.status_code, response.json())
