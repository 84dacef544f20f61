"""The one container walk: every container with its path, every misshapen list or item, in spec order;
and every reader of containers (rules, isolation, look-alikes, demand) survives the misshapen ones."""

from __future__ import annotations

from typing import Any

import pytest

from tests.core import reads
from webhook.core.admission import isolation, lookalikes, verdict
from webhook.core.specs import demand, podread, podspec, templates
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources

NAMES = resources.GpuResourceNames()
MEM = "aliyun.com/gpu-mem"
GPU = {"name": "gpu", "resources": {"limits": {"aliyun.com/gpu-mem": "4"}}}


def test_containers_come_app_first_then_init_each_with_its_path_under_the_prefix():
    a, b, i = {"name": "a"}, {"name": "b"}, {"name": "i"}
    found = podspec.containers({"initContainers": [i], "containers": [a, b]}, "spec.template")
    assert found == [
        podspec.Container("spec.template.spec.containers[0]", "containers", 0, a),
        podspec.Container("spec.template.spec.containers[1]", "containers", 1, b),
        podspec.Container("spec.template.spec.initContainers[0]", "initContainers", 0, i),
    ]
    assert [c.init for c in found if isinstance(c, podspec.Container)] == [False, False, True]


def test_absent_and_null_lists_are_empty():
    assert podspec.containers({}) == []
    assert podspec.containers({"containers": None, "initContainers": []}) == []


@pytest.mark.parametrize(
    "value",
    [3, 0, True, False, "x", {"name": "c"}, 1.5],
    ids=["3", "0", "true", "false", "str", "obj", "float"],
)
def test_a_list_of_the_wrong_type_is_one_wrong_shape_in_its_place(value):
    found = podspec.containers({"containers": [GPU], "initContainers": value})
    assert found[0] == podspec.Container("spec.containers[0]", "containers", 0, GPU)
    assert found[1:] == [
        podspec.WrongShape("spec.initContainers", "initContainers", value, "a list of containers")
    ]
    assert podspec.objects({"containers": [GPU], "initContainers": value}) == found[:1]


def test_an_item_that_is_no_object_is_a_wrong_shape_at_its_index():
    found = podspec.containers({"containers": [GPU, 7, None]})
    assert found[1:] == [
        podspec.WrongShape("spec.containers[1]", "containers", 7, "an object (a container)"),
        podspec.WrongShape("spec.containers[2]", "containers", None, "an object (a container)"),
    ]


MISSHAPEN: list[tuple[str, dict[str, Any]]] = [
    ("init-number", {"containers": [GPU], "initContainers": 3}),
    ("init-true", {"containers": [GPU], "initContainers": True}),
    ("app-number", {"containers": 3, "initContainers": [GPU]}),
    ("app-true", {"containers": True, "initContainers": [GPU]}),
    ("app-float", {"containers": 2.5, "initContainers": [GPU]}),
    ("init-item-number", {"containers": [GPU], "initContainers": [GPU, 4]}),
]


@pytest.mark.parametrize("spec", [m[1] for m in MISSHAPEN], ids=[m[0] for m in MISSHAPEN])
def test_every_reader_of_containers_turns_a_misshapen_list_into_a_message_naming_it(spec):
    wrong = next(i for i in podspec.containers(spec) if isinstance(i, podspec.WrongShape))
    # The rules deny it, naming the field ...
    found = reads.findings({}, spec, "", NAMES)
    assert any(v.path == wrong.path and "has the wrong type" in v.problem for v in found)
    # ... the isolation decision and look-alike warnings read the containers that are objects ...
    template = templates.PodTemplate("", {}, spec)
    assert isolation.decide(template, isolation.IsolationPolicy(), NAMES).value == "false"
    assert lookalikes.warnings(podread.of_spec(spec, NAMES).view) == []
    # ... the extender's demand names the same field ...
    with pytest.raises(Finding, match=wrong.path.replace("[", r"\[").replace("]", r"\]")):
        demand.pod_demand({"spec": spec})
    # ... and the verdict denies.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    assert not verdict.evaluate(pod, verdict.Policy()).allowed


def test_resource_names_are_sorted_once_into_gpu_names_and_look_alike_candidates():
    body = {
        "resources": {
            "limits": {"nvidia.com/gpu": 1, "cpu": "1", "aliyun.com/gpu-mem": 4, "example.com/fpga": 1},
            "requests": {"nvidia.com/mig-1g.5gb": 1, "example.com/fpga": 1, "vendor.io/x": 2, 5: 1},
        }
    }
    c = podspec.Container("spec.containers[0]", "containers", 0, body)
    assert c.gpu_names == ("aliyun.com/gpu-mem", "nvidia.com/gpu", "nvidia.com/mig-1g.5gb")
    # Each name once, with the first section it is in; cpu and a YAML key such as 5 are no candidates.
    assert c.other_names == (("limits", "example.com/fpga"), ("requests", "vendor.io/x"))


def test_gpu_names_follow_the_configured_names():
    names = resources.GpuResourceNames(whole_device=frozenset({"gpu"}), whole_device_prefixes=("acme/",))
    body = {"resources": {"limits": {"gpu": 1, "acme/big": 1, "nvidia.com/gpu": 1}}}
    c = podspec.Container("p", "containers", 0, body, podspec.matcher(names))
    assert c.gpu_names == ("acme/big", "gpu")
    assert c.other_names == (("limits", "nvidia.com/gpu"),)


def test_an_amount_is_the_limit_else_the_request_and_each_is_parsed_once():
    body = {"resources": {"limits": {MEM: 4}, "requests": {MEM: 3, "nvidia.com/gpu": "x"}}}
    c = podspec.Container("p", "containers", 0, body)
    first = c.amount(MEM)
    assert first is not None and first.section == "limits" and first.parsed == 4
    assert c.amount(MEM) is first
    assert c.request(MEM) == 3 and c.request(MEM) is c.request(MEM)
    card = c.amount("nvidia.com/gpu")
    assert card is not None and card.section == "requests" and isinstance(card.parsed, str)
    assert c.amount("cpu") is None
    assert c.asks("nvidia.com/gpu") and not c.holds("nvidia.com/gpu")  # unreadable: asks, holds nothing


@pytest.mark.parametrize(
    ("value", "asks", "holds"),
    [(1, True, True), (0, False, False), (-1, False, False), (True, True, False), (10**5000, True, True)],
    ids=["one", "zero", "negative", "boolean", "too-large"],
)
def test_asking_and_holding_read_the_sign_of_what_parses(value, asks, holds):
    c = podspec.Container("p", "containers", 0, {"resources": {"limits": {MEM: value}}})
    assert (c.asks(MEM), c.holds(MEM)) == (asks, holds)


def test_the_sorted_names_kept_are_bounded_in_number_and_size():
    matcher = podspec.matcher(resources.GpuResourceNames(count="bench.example/count"))
    long_name = "example.com/" + "x" * 2000
    podspec.Container("p", "containers", 0, {"resources": {"limits": {long_name: 1}}}, matcher)
    assert not matcher.seen  # too long to keep, still sorted
    for i in range(1100):
        podspec.Container("p", "containers", 0, {"resources": {"limits": {f"example.com/r{i}": 1}}}, matcher)
    assert len(matcher.seen) == 1024
    yaml_keys = podspec.Container("p", "containers", 0, {"resources": {"limits": {7: 1}}}, matcher)
    assert (yaml_keys.gpu_names, yaml_keys.other_names) == ((), ())
