"""GPU resource rules on one pod spec: good and bad values, ordering, wrong types, exact messages."""

from __future__ import annotations

from typing import Any

import pytest

from tests.core import reads
from webhook.core.specs import finding
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources

NAMES = resources.GpuResourceNames()
MEM = "aliyun.com/gpu-mem"
GPU = "nvidia.com/gpu"


def ctr(name: str = "c", limits: Any = None, requests: Any = None, **extra: Any) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if limits is not None:
        res["limits"] = limits
    if requests is not None:
        res["requests"] = requests
    return {"name": name, "image": "x", "resources": res, **extra}


def check(*containers: Any, init: Any = (), labels: Any = None, prefix: str = "") -> list[Finding]:
    metadata: dict[str, Any] = {} if labels is None else {"labels": labels}
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return reads.findings(metadata, spec, prefix, NAMES)


GOOD = [
    ("gpu-mem limit only", [ctr(limits={MEM: 4})]),
    ("gpu-mem as a string", [ctr(limits={MEM: "4"})]),
    ("equal request and limit", [ctr(limits={MEM: "2"}, requests={MEM: "2"})]),
    ("equal numerically: 1, 1.0, 1000m", [ctr(limits={GPU: "1.0"}, requests={GPU: "1000m"})]),
    ("whole gpu as json number", [ctr(limits={GPU: 1})]),
    ("whole gpu as float 2.0", [ctr(limits={GPU: 2.0})]),
    ("exponent spelling", [ctr(limits={GPU: "1e0"})]),
    ("zero", [ctr(limits={GPU: "0"})]),
    ("rounds up to a whole number at milli", [ctr(limits={GPU: "0.9999999"}, requests={GPU: "1"})]),
    ("mig device", [ctr(limits={"nvidia.com/mig-1g.5gb": 1})]),
    ("non-gpu fractions are not ours", [ctr(limits={"cpu": "0.5", "example.com/fpga": "0.5"})]),
    ("no resources at all", [{"name": "c", "image": "x"}]),
    ("null resources", [{"name": "c", "resources": None}]),
    ("null quantity is zero", [ctr(limits={MEM: None})]),
]


@pytest.mark.parametrize("containers", [c for _, c in GOOD], ids=[i for i, _ in GOOD])
def test_valid_gpu_resources_give_no_violation(containers):
    assert check(*containers) == []


BAD = [
    (
        "fractional whole gpu",
        ctr("train", limits={GPU: "0.5"}),
        'spec.containers[0].resources.limits[nvidia.com/gpu] (container "train"): "0.5": only whole GPUs '
        "are possible with nvidia.com/gpu; a share of one GPU is asked with aliyun.com/gpu-mem (in GiB); "
        'fix: use a whole number of GPUs such as "1", or aliyun.com/gpu-mem: "<GiB>" for a share of one GPU',
    ),
    (
        "milli gpu",
        ctr("train", limits={GPU: "1500m"}),
        'spec.containers[0].resources.limits[nvidia.com/gpu] (container "train"): "1500m": only whole GPUs '
        "are possible with nvidia.com/gpu; a share of one GPU is asked with aliyun.com/gpu-mem (in GiB); "
        'fix: use a whole number of GPUs such as "1", or aliyun.com/gpu-mem: "<GiB>" for a share of one GPU',
    ),
    (
        "fractional gpu-mem",
        ctr("nb", limits={MEM: 2.5}),
        'spec.containers[0].resources.limits[aliyun.com/gpu-mem] (container "nb"): "2.5": aliyun.com/gpu-mem '
        "counts whole GiB; a fraction of a GiB is not possible; fix: write 3; the unit is GiB",
    ),
    (
        "negative",
        ctr("nb", limits={MEM: "-1"}),
        'spec.containers[0].resources.limits[aliyun.com/gpu-mem] (container "nb"): "-1": aliyun.com/gpu-mem '
        "cannot be negative; fix: write 0 or more, e.g. 4; the unit is GiB",
    ),
    (
        "unparsable",
        ctr("nb", limits={GPU: "1K"}),
        'spec.containers[0].resources.limits[nvidia.com/gpu] (container "nb"): "1K": '
        "is not a valid quantity: "
        'unable to parse quantity\'s suffix; fix: write a whole number such as "1"',
    ),
    (
        "request without limit",
        ctr("nb", requests={MEM: "2"}),
        'spec.containers[0].resources.limits[aliyun.com/gpu-mem] (container "nb"): '
        "requests[aliyun.com/gpu-mem] is 2 but there is no limit; GPU resources cannot be overcommitted; "
        "fix: set limits[aliyun.com/gpu-mem] equal to the request",
    ),
    (
        "request differs from limit",
        ctr("nb", limits={GPU: 2}, requests={GPU: "1"}),
        'spec.containers[0].resources.requests[nvidia.com/gpu] (container "nb"): "1": must equal '
        "limits[nvidia.com/gpu] (2); GPU resources cannot be overcommitted; "
        "fix: set requests[nvidia.com/gpu] equal to the limit, or leave it out (it defaults to the limit)",
    ),
    (
        "gpu-count as a resource is denied with the label as fix",
        ctr("nb", limits={"aliyun.com/gpu-count": "2"}),
        'spec.containers[0].resources.limits[aliyun.com/gpu-count] (container "nb"): "2": '
        "aliyun.com/gpu-count is not a resource a container asks for; the number of GPUs to spread the "
        "pod's GPU memory over is the pod label aliyun.com/gpu-count; fix: remove it from resources and "
        'set the pod label aliyun.com/gpu-count: "2" (metadata.labels)',
    ),
    (
        "gpu-mem with a byte suffix",
        ctr("nb", limits={MEM: "3Gi"}),
        'spec.containers[0].resources.limits[aliyun.com/gpu-mem] (container "nb"): "3Gi": is read as '
        "3221225472 GiB: aliyun.com/gpu-mem is a plain number of GiB, with no unit suffix; "
        "fix: write 3; the unit is GiB",
    ),
    (
        "whole gpus and gpu-mem in one container",
        ctr("nb", limits={GPU: 1, MEM: 4}),
        'spec.containers[0].resources.limits (container "nb"): asks for whole GPUs (nvidia.com/gpu) and a '
        "share of GPU memory (aliyun.com/gpu-mem) at once; a node serves one or the other; fix: keep "
        "nvidia.com/gpu for whole GPUs, or aliyun.com/gpu-mem (GiB) for a share of one GPU",
    ),
]


@pytest.mark.parametrize(("container", "expected"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_invalid_gpu_resource_is_reported_with_path_container_value_and_fix(container, expected):
    assert [str(v) for v in check(container)] == [expected]


def test_fractional_gpu_limit_is_denied_with_its_fields():
    (v,) = check(ctr("train", limits={GPU: "0.5"}), prefix="spec.template")
    assert v.path == "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert v.container == "train"
    assert v.value == "0.5"
    assert "whole GPUs" in v.problem and MEM in v.problem


def test_request_copied_from_a_bad_limit_is_reported_once():
    # A Pod reaches the mutating webhook after defaulting copied its limit into requests.
    assert len(check(ctr(limits={GPU: "0.5"}, requests={GPU: "500m"}))) == 1


def test_bad_request_and_bad_limit_that_differ_are_both_reported():
    found = check(ctr(limits={GPU: "0.5"}, requests={GPU: "1K"}))
    assert [v.path.split("resources.")[1] for v in found] == [
        "limits[nvidia.com/gpu]",
        "requests[nvidia.com/gpu]",
    ]


def test_request_only_with_a_bad_value_reports_value_and_missing_limit():
    found = check(ctr(requests={GPU: "0.5"}))
    assert [v.path.split("resources.")[1] for v in found] == [
        "requests[nvidia.com/gpu]",
        "limits[nvidia.com/gpu]",
    ]


def test_violations_come_in_container_then_init_container_then_resource_name_order():
    found = check(
        ctr("a", limits={GPU: "0.5", MEM: "0.5", "nvidia.com/mig-1g.5gb": "0.5"}),
        ctr("b", requests={MEM: 1}),
        init=[ctr("i", limits={GPU: "-1"})],
        labels={"aliyun.com/gpu-count": "0"},
    )
    assert [v.path for v in found] == [
        "spec.containers[0].resources.limits[aliyun.com/gpu-mem]",
        "spec.containers[0].resources.limits[nvidia.com/gpu]",
        "spec.containers[0].resources.limits[nvidia.com/mig-1g.5gb]",
        "spec.containers[0].resources.limits",  # whole GPUs and gpu-mem in one container
        "spec.containers[1].resources.limits[aliyun.com/gpu-mem]",
        "spec.initContainers[0].resources.limits[nvidia.com/gpu]",
        "metadata.labels[aliyun.com/gpu-count]",
    ]
    assert [v.container for v in found] == ["a", "a", "a", "a", "b", "i", None]


def test_ephemeral_containers_are_ignored():
    spec = {"containers": [], "ephemeralContainers": [ctr(limits={GPU: "0.5"})]}
    assert reads.findings({}, spec, "", NAMES) == []


def test_configured_resource_names_are_used():
    names = resources.GpuResourceNames(whole_device=frozenset({"example.com/gpu"}), memory="example.com/vram")
    spec = {"containers": [ctr(limits={"example.com/gpu": "0.5", "example.com/vram": "1.5", GPU: "0.5"})]}
    found = reads.findings({}, spec, "", names)
    assert [v.path for v in found] == [
        "spec.containers[0].resources.limits[example.com/gpu]",
        "spec.containers[0].resources.limits[example.com/vram]",
        "spec.containers[0].resources.limits",
    ]
    assert "example.com/vram (in GiB)" in found[0].problem


GPU_COUNT = [
    ("2 over 8", "2", 8, None),
    ("json number", 2, 8, None),
    ("1 always divides", "1", 7, None),
    ("no gpu-mem at all", "4", 0, None),
    ("zero", "0", 8, "must be a positive whole number of GPUs"),
    ("negative", "-2", 8, "must be a positive whole number of GPUs"),
    ("words", "two", 8, "must be a positive whole number of GPUs"),
    ("fraction", "1.5", 8, "must be a positive whole number of GPUs"),
    ("seven digits", "1000000", 8, "must be a positive whole number of GPUs"),
    ("thousands of digits", "9" * 5000, 8, "must be a positive whole number of GPUs"),
    ("boolean", True, 8, "must be a positive whole number of GPUs"),
    ("uneven split", "2", 7, "split the pod's 7 GiB of GPU memory over 2 GPUs"),
    ("more gpus than units", "4", 2, "split the pod's 2 GiB of GPU memory over 4 GPUs"),
]


@pytest.mark.parametrize(
    ("label", "mem", "problem"), [g[1:] for g in GPU_COUNT], ids=[g[0] for g in GPU_COUNT]
)
def test_gpu_count_label_must_be_positive_and_divide_the_pods_gpu_memory(label, mem, problem):
    found = check(ctr(limits={MEM: mem} if mem else None), labels={"aliyun.com/gpu-count": label})
    if problem is None:
        assert found == []
    else:
        (v,) = found
        assert v.path == "metadata.labels[aliyun.com/gpu-count]"
        assert v.container is None
        assert problem in v.problem
        assert len(str(v)) < 400


def test_gpu_count_split_counts_app_containers_and_skips_bad_values_already_reported():
    found = check(ctr(limits={MEM: "x"}), labels={"aliyun.com/gpu-count": "2"})
    assert [v.path for v in found] == ["spec.containers[0].resources.limits[aliyun.com/gpu-mem]"]
    assert check(ctr(limits={MEM: 3}), ctr(limits={MEM: 1}), labels={"aliyun.com/gpu-count": "2"}) == []


WRONG_TYPES = [
    ("containers is a string", {"containers": "abc"}, "spec.containers", "a list of containers"),
    ("container is a number", {"containers": [7]}, "spec.containers[0]", "an object (a container)"),
    ("resources is a list", {"containers": [{"resources": []}]}, "spec.containers[0].resources", "an object"),
    (
        "limits is a string",
        {"containers": [{"resources": {"limits": "1"}}]},
        "spec.containers[0].resources.limits",
        "an object",
    ),
    (
        "init containers is an object",
        {"containers": [], "initContainers": {}},
        "spec.initContainers",
        "a list of containers",
    ),
]


@pytest.mark.parametrize(
    ("spec", "path", "expected"), [w[1:] for w in WRONG_TYPES], ids=[w[0] for w in WRONG_TYPES]
)
def test_wrong_json_type_is_a_violation_naming_the_field(spec, path, expected):
    (v,) = reads.findings({}, spec, "", NAMES)
    assert v.path == path
    assert v.problem.startswith(f"has the wrong type: expected {expected}, got ")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [(True, "true"), ([1], None), ({"a": 1}, None), (10**5000, "<a very large number>"), ([10**5000], None)],
    ids=["bool", "list", "object", "huge int", "list holding a huge int"],
)
def test_quantity_of_the_wrong_type_is_reported_not_raised(raw, shown):
    (v,) = check(ctr(limits={GPU: raw}))
    assert v.problem.startswith("is not a valid quantity")
    if shown is not None:
        assert v.value == shown


def test_labels_of_the_wrong_type_are_reported():
    (v,) = check(ctr(limits={MEM: 2}), labels=["aliyun.com/gpu-count"])
    assert v.path == "metadata.labels"


def test_non_string_resource_keys_from_yaml_are_ignored():
    assert check(ctr(limits={1: "0.5", None: "x", GPU: 1})) == []


def test_violation_is_one_line_with_control_characters_escaped():
    (v,) = check(ctr("evil\nname", limits={GPU: "0.5\r\n"}))
    text = str(v)
    assert "\n" not in text and "\r" not in text
    assert '(container "evil\\x0aname")' in text


def test_violation_without_container_or_value_omits_them():
    v = Finding("metadata.labels", None, None, "is wrong", "fix it")
    assert str(v) == "metadata.labels: is wrong; fix: fix it"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("1", "1"),
        (2, "2"),
        (2.5, "2.5"),
        (None, "null"),
        (False, "false"),
        ({}, "<an object>"),
        ("x" * 100, "x" * 59 + "…"),
    ],
    ids=["string", "int", "float", "null", "bool", "object", "long"],
)
def test_show_writes_values_as_the_user_wrote_them(value, shown):
    assert finding.show(value) == shown
