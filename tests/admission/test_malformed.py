"""Never a 500: each malformed shape from issue 12 gets a clear 400 or a denial naming the field, bounded."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest

from tests.admission import asgi, samples
from webhook.admission import review
from webhook.core.admission import verdict
from webhook.core.specs.finding import Finding

GPU_MEM = {"aliyun.com/gpu-mem": "4"}


def gpu_review(**spec: Any) -> dict[str, Any]:
    obj = samples.pod(samples.pod_spec(samples.container(limits=GPU_MEM)))
    obj["spec"].update(spec)
    return samples.review(obj, uid="malformed-1")


def answer(body: bytes, path: str = "/validate") -> tuple[int, Any]:
    status, out = asyncio.run(asgi.post(asgi.webhook_app(), path, body))
    return status, json.loads(out)


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("containers", 3),
        ("containers", True),
        ("initContainers", 3),
        ("initContainers", True),
        ("initContainers", "x"),
    ],
    ids=["containers-number", "containers-bool", "init-number", "init-bool", "init-string"],
)
def test_a_container_list_of_the_wrong_type_is_a_denial_naming_the_field(path, field, value):
    status, body = answer(json.dumps(gpu_review(**{field: value})).encode(), path)
    assert status == 200
    assert body["response"]["allowed"] is False
    assert f"spec.{field}" in body["response"]["status"]["message"]


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ('"uid": "\\ud800"', "surrogate"),
        ('"uid": "\\udc00x"', "surrogate"),
        ('"terminationGracePeriodSeconds": NaN', "not valid JSON"),
        ('"terminationGracePeriodSeconds": Infinity', "not valid JSON"),
        ('"terminationGracePeriodSeconds": -Infinity', "not valid JSON"),
    ],
    ids=["lone-high-surrogate", "lone-low-surrogate", "nan", "infinity", "minus-infinity"],
)
def test_what_no_api_server_sends_is_a_400_saying_why(raw, error):
    text = json.dumps(gpu_review())
    key = raw.split(":")[0]
    start = text.index(key)
    end = text.index(",", start)
    status, body = answer((text[:start] + raw + text[end:]).encode())
    assert status == 400
    assert error in body["error"]


@pytest.mark.parametrize(
    ("where", "allowed"),
    [
        ('"terminationGracePeriodSeconds": 30', True),
        ('"aliyun.com/gpu-mem": "4"', False),
    ],
    ids=["ignored-field", "gpu-field"],
)
@pytest.mark.parametrize("number", ["9" * 5000, "-" + "9" * 400, "1e400", "18446744073709551616"])
def test_numbers_past_any_range_still_get_an_answer(where, allowed, number):
    text = json.dumps(gpu_review())
    key = where.split(":")[0]
    status, body = answer(text.replace(where, f"{key}: {number}", 1).encode())
    assert status == 200
    assert body["response"]["uid"] == "malformed-1"
    assert body["response"]["allowed"] is allowed
    if not allowed:
        assert "aliyun.com/gpu-mem" in body["response"]["status"]["message"]


def test_a_pod_with_forty_thousand_bad_containers_gets_a_short_denial_in_bounded_time():
    half = {"limits": {"nvidia.com/gpu": "0.5"}}
    containers = [{"name": f"c{i}", "resources": half} for i in range(40_000)]
    body = json.dumps(gpu_review(containers=containers)).encode()
    assert len(body) < 3 * 1024 * 1024  # what the default maxBodyBytes lets in
    start = time.monotonic()
    status, out = answer(body)
    # Linear in the body (~0.5 s here on a busy 2-core machine); the bound catches anything quadratic.
    assert time.monotonic() - start < 5
    assert status == 200
    message = out["response"]["status"]["message"]
    assert len(message) <= verdict.MAX_MESSAGE_CHARS
    lines = message.split("\n")
    assert lines[0] == "Pod has 40000 problems with GPU resources:"
    assert len(lines) == 1 + verdict.MAX_LISTED_PROBLEMS + 1
    assert lines[-1] == f"... and {40_000 - verdict.MAX_LISTED_PROBLEMS} more (fix these and apply again)"


def test_a_message_is_capped_by_characters_as_well_as_by_lines():
    def denial(*problems: str) -> str:
        found = tuple(Finding(f"spec.x[{i}]", "c", None, p, "fix it") for i, p in enumerate(problems))
        return verdict.Verdict((), found, (), allowed=False, kind="Pod").message()

    message = denial(*("x" * 1000 for _ in range(15)))
    assert len(message) <= verdict.MAX_MESSAGE_CHARS
    assert len(message.split("\n")) < 1 + 15
    assert message.endswith("more (fix these and apply again)")
    huge = denial("y" * 100_000)  # one problem longer than the whole message: clipped, still listed
    assert len(huge) <= verdict.MAX_MESSAGE_CHARS and huge.split("\n")[1].startswith("spec.x[0]")
    assert (
        denial("short")
        == 'Pod has 1 problem with GPU resources:\nspec.x[0] (container "c"): short; fix: fix it'
    )


def test_warnings_are_capped_and_say_how_many_more():
    # 100 containers, each with a misspelt GPU name: 100 distinct warnings, capped by the core.
    containers = [{"name": f"c{i}", "resources": {"limits": {"nvidia.com/gpus": "1"}}} for i in range(100)]
    answer = review.review(gpu_review(containers=containers), "validate", review.Policy(verdict.Policy()))
    warnings = answer.review["response"]["warnings"]
    assert len(warnings) == verdict.MAX_WARNINGS
    assert warnings[-1] == f"... and {100 - verdict.MAX_WARNINGS + 1} more warnings"


def test_a_client_that_goes_away_mid_body_is_logged_without_a_traceback(caplog):
    caplog.set_level(logging.DEBUG)
    body = json.dumps(gpu_review()).encode()
    asyncio.run(asgi.post(asgi.webhook_app(), "/validate", body, disconnect=True))
    records = [r for r in caplog.records if r.name.startswith(("webhook", "uvicorn"))]
    assert [r.fields["verdict"] for r in records] == ["disconnected"]
    assert not any(r.exc_info for r in caplog.records)
