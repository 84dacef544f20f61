"""The one container walk: every container with its path, every misshapen list or item, in spec order;
and every reader of containers (rules, isolation, look-alikes, demand) survives the misshapen ones."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core import demand, isolation, lookalikes, podspec, resources, rules, templates, verdict

NAMES = resources.GpuResourceNames()
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
    found = rules.check_pod_spec({}, spec, "", NAMES)
    assert any(v.path == wrong.path and "has the wrong type" in v.problem for v in found)
    # ... the isolation decision and look-alike warnings read the containers that are objects ...
    template = templates.PodTemplate("", {}, spec)
    assert isolation.decide(template, isolation.IsolationPolicy(), NAMES).value == "false"
    assert lookalikes.warnings(spec, NAMES) == []
    # ... the extender's demand names the same field ...
    with pytest.raises(demand.DemandError, match=wrong.path.replace("[", r"\[").replace("]", r"\]")):
        demand.pod_demand({"spec": spec})
    # ... and the verdict denies.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    assert not verdict.evaluate(pod, verdict.Policy()).allowed
