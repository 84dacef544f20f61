"""The walk reads every GPU value once and the rules read the walk only (issue 36, part 2): a fine pod is
judged without a second read of the raw pod."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.admission import verdict
from webhook.core.specs import gpumem, podspec, resourcerules, specview, templates
from webhook.core.wire import resources

NAMES = resources.GpuResourceNames()
MEM = "aliyun.com/gpu-mem"


def test_each_gpu_value_is_read_in_the_walk_with_what_the_rules_ask():
    body = {
        "name": "a",
        "resources": {"limits": {MEM: "4", "nvidia.com/gpu": "0.5"}, "requests": {MEM: "4", "cpu": "1"}},
    }
    c = podspec.Container("spec.containers[0]", "containers", 0, body, podspec.matcher(NAMES))
    memory, card = c.gpu[MEM], c.gpu["nvidia.com/gpu"]
    assert memory.limit is not None and memory.limit.plain and memory.settled
    assert memory.request is not None and memory.request.parsed is memory.limit.parsed  # one parse
    assert (memory.asks, memory.holds, memory.amount) == (True, True, memory.limit)
    assert not card.settled and card.request is None and not c.settled
    assert c.name == "a" and c.wrong == ()


@pytest.mark.parametrize(
    ("raw", "plain"),
    [("4", True), (4, True), ("0", True), ("4k", False), ("3Gi", False), ("0.5", False), ("-1", False)],
)
def test_a_plain_value_is_one_no_rule_says_anything_of(raw: object, plain: bool):
    assert gpumem.read(raw)[1] is plain
    for unit in ("GiB", "MiB", "128MiB"):
        fine = gpumem.memory_problem(raw, gpumem.parse(raw), MEM, unit) is None
        assert fine or not plain


def test_misshapen_sections_are_found_in_the_walk_in_the_order_the_rules_name_them():
    body = {"name": "a", "resources": {"limits": 3, "requests": "x"}}
    c = podspec.Container("p", "containers", 0, body)
    assert [(w.path, w.value) for w in c.wrong] == [("p.resources.limits", 3), ("p.resources.requests", "x")]
    assert [w.path for w in podspec.Container("p", "containers", 0, {"resources": []}).wrong] == [
        "p.resources"
    ]


def test_a_fine_pod_is_judged_from_the_view_without_reading_the_pod_again(monkeypatch: pytest.MonkeyPatch):
    spec = {"containers": [{"name": "a", "resources": {"limits": {MEM: "4"}, "requests": {MEM: "4"}}}]}
    view = specview.read(templates.PodTemplate("", {"labels": {}}, spec), NAMES)

    def no(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("read again")

    for name in ("amount", "request", "asks", "holds"):
        monkeypatch.setattr(podspec.Container, name, no)
    monkeypatch.setattr(gpumem, "parse", no)
    monkeypatch.setattr(gpumem, "memory_problem", no)
    assert resourcerules.check(view) == []
    found = verdict.evaluate({"kind": "Pod", "metadata": {}, "spec": spec}, verdict.Policy())
    assert found.allowed and found.templates[0].isolation == "false"
