"""A pod's GPU-memory demand: per-container units, init containers, the gpu-count split, bad input."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core.admission import verdict
from webhook.core.specs import demand
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources

MEM = "aliyun.com/gpu-mem"


def ctr(limits: Any = None, requests: Any = None, name: str = "c") -> dict[str, Any]:
    res: dict[str, Any] = {}
    if limits is not None:
        res["limits"] = limits
    if requests is not None:
        res["requests"] = requests
    return {"name": name, "resources": res}


def pod(*containers: Any, init: Any = (), labels: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": {} if labels is None else {"labels": labels}, "spec": spec}


@pytest.mark.parametrize(
    ("container", "units"),
    [
        (ctr(limits={MEM: 4}), 4),
        (ctr(limits={MEM: "4"}), 4),
        (ctr(limits={MEM: "4000m"}), 4),
        (ctr(requests={MEM: "3"}), 3),
        (ctr(limits={MEM: "2"}, requests={MEM: "1"}), 2),
        (ctr(limits={"nvidia.com/gpu": 1}), 0),
        ({"name": "c"}, 0),
        (ctr(limits={MEM: None}), 0),
    ],
    ids=[
        "int",
        "string",
        "milli",
        "request only",
        "limit wins",
        "other resource",
        "no resources",
        "null",
    ],
)
def test_container_units_reads_the_limit_then_the_request(container, units):
    assert demand.container_units(container) == units


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.5", "a fraction of a GiB is not possible; fix: write 1; the unit is GiB"),
        ("-1", "cannot be negative"),
        ("1K", "unable to parse quantity's suffix"),
        ("3Gi", "is read as 3221225472 GiB"),
        (True, "quantities must match"),
        ([10**5000], "quantities must match"),
    ],
    ids=["fraction", "negative", "bad suffix", "byte suffix", "boolean", "list holding a huge int"],
)
def test_container_units_rejects_bad_values_with_demand_error(value, message):
    prefix = r'resources\.limits\[aliyun\.com/gpu-mem\] \(container "c"\)'
    with pytest.raises(Finding, match=prefix) as err:
        demand.container_units(ctr(limits={MEM: value}))
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("container", "field"),
    [
        ({"name": "c", "resources": "x"}, "resources"),
        ({"name": "c", "resources": {"limits": [MEM]}}, "resources.limits"),
        ({"name": "c", "resources": {"requests": 3}}, "resources.requests"),
    ],
    ids=["resources", "limits", "requests"],
)
def test_container_units_names_a_wrong_typed_field(container, field):
    with pytest.raises(Finding, match=rf'^{field} \(container "c"\): (".+": )?has the wrong type'):
        demand.container_units(container)


def test_pod_demand_sums_app_containers_and_keeps_init_containers_apart():
    want = demand.pod_demand(
        pod(ctr(limits={MEM: 2}), ctr(), ctr(limits={MEM: 3}), init=[ctr(limits={MEM: 4})])
    )
    assert want.containers == (2, 0, 3)
    assert want.init_containers == (4,)
    assert (want.total, want.effective, want.gpu_count, want.per_gpu) == (5, 5, 1, 5)
    assert want.asks()


@pytest.mark.parametrize(
    ("app", "init", "label", "room"),
    [((2, 3), 7, None, 5), ((0,), 4, None, 0), ((4, 4), 5, "2", 4)],
    ids=["more-than-the-app", "app-asks-none", "uneven-over-two-gpus"],
)
def test_an_init_container_asking_more_than_the_app_containers_hold_is_refused(app, init, label, room):
    # The extender would reserve only the app containers' memory; the init container would use more.
    obj = pod(*(ctr(limits={MEM: u}) if u else ctr() for u in app), init=[ctr(limits={MEM: init})])
    if label:
        obj["metadata"] = {"labels": {resources.GPU_COUNT_LABEL: label}}
    with pytest.raises(Finding) as err:
        demand.pod_demand(obj)
    assert f"an init container asks {init} GiB of {MEM}, more than the pod's app containers hold" in str(
        err.value
    )
    assert f"({room})" in str(err.value) and "spec.initContainers[0].resources.limits" in str(err.value)


def test_an_init_container_that_splits_evenly_over_the_pods_gpus_fits():
    obj = pod(ctr(limits={MEM: 4}), ctr(limits={MEM: 4}), init=[ctr(limits={MEM: 8})])
    obj["metadata"] = {"labels": {resources.GPU_COUNT_LABEL: "2"}}
    assert demand.pod_demand(obj).init_containers == (8,)


def test_pod_without_gpu_memory_asks_nothing():
    assert not demand.pod_demand(pod(ctr(limits={"nvidia.com/gpu": 1}))).asks()
    assert not demand.pod_demand({}).asks()


def test_gpu_count_label_splits_the_total():
    want = demand.pod_demand(pod(ctr(limits={MEM: 8}), labels={"aliyun.com/gpu-count": "2"}))
    assert (want.gpu_count, want.per_gpu) == (2, 4)


def test_pod_demand_honours_configured_names():
    names = resources.GpuResourceNames(memory="example.com/vram", count="example.com/n")
    want = demand.pod_demand(pod(ctr(limits={"example.com/vram": 6}), labels={"example.com/n": "3"}), names)
    assert (want.total, want.gpu_count) == (6, 3)


@pytest.mark.parametrize(
    ("labels", "count"),
    [
        (None, 1),
        ({}, 1),
        ({"aliyun.com/gpu-count": "3"}, 3),
        ({"aliyun.com/gpu-count": " 2 "}, 2),
        ({"aliyun.com/gpu-count": 4}, 4),
    ],
    ids=["no labels", "no label", "three", "spaces", "json number"],
)
def test_gpu_count_reads_the_label(labels, count):
    assert demand.gpu_count(labels) == count


@pytest.mark.parametrize(
    "labels",
    [
        {"aliyun.com/gpu-count": "0"},
        {"aliyun.com/gpu-count": "-1"},
        {"aliyun.com/gpu-count": "1.5"},
        {"aliyun.com/gpu-count": "two"},
        {"aliyun.com/gpu-count": "\u0663"},  # an Arabic-Indic three: a digit, but not ASCII
        {"aliyun.com/gpu-count": "1000000"},
        {"aliyun.com/gpu-count": "9" * 5000},
        {"aliyun.com/gpu-count": 10**5000},
        {"aliyun.com/gpu-count": True},
        {"aliyun.com/gpu-count": ["2"]},
        ["aliyun.com/gpu-count"],
        "aliyun.com/gpu-count=2",
    ],
    ids=[
        "zero",
        "negative",
        "fraction",
        "words",
        "non-ascii digit",
        "seven digits",
        "5000 digits",
        "huge int",
        "boolean",
        "list value",
        "labels is a list",
        "labels is a string",
    ],
)
def test_bad_gpu_count_raises_demand_error_with_a_short_message(labels):
    with pytest.raises(Finding) as err:
        demand.gpu_count(labels)
    assert len(str(err.value)) < 160


def test_check_split_needs_a_whole_number_per_gpu():
    demand.check_split(8, 2)
    demand.check_split(0, 4)
    demand.check_split(7, 1)
    with pytest.raises(Finding, match=r"split the pod's 7 GiB of GPU memory over 2 GPUs"):
        demand.check_split(7, 2)


def test_pod_demand_raises_on_an_uneven_split():
    with pytest.raises(Finding, match="multiple of 3"):
        demand.pod_demand(pod(ctr(limits={MEM: 4}), labels={"aliyun.com/gpu-count": "3"}))


@pytest.mark.parametrize(
    "obj",
    [
        {"spec": "x"},
        {"metadata": ["x"], "spec": {}},
        {"spec": {"containers": "x"}},
        {"spec": {"containers": [1]}},
        {"spec": {"initContainers": {"a": 1}}},
        {"metadata": {"labels": "x"}, "spec": {}},
    ],
    ids=[
        "spec string",
        "metadata list",
        "containers string",
        "container number",
        "init object",
        "labels string",
    ],
)
def test_pod_demand_raises_demand_error_on_wrong_types(obj):
    with pytest.raises(Finding):
        demand.pod_demand(obj)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"spec": 7}, "spec: has the wrong type: expected an object, got a number"),
        (
            {"spec": {"containers": 3}},
            'spec.containers: "3": has the wrong type: expected a list of containers',
        ),
        (
            {"spec": {"containers": [ctr(), "x"]}},
            'spec.containers[1]: "x": has the wrong type: expected an object',
        ),
        (
            pod(ctr(), ctr(limits={MEM: "3G"}, name="train")),
            'spec.containers[1].resources.limits[aliyun.com/gpu-mem] (container "train"): "3G": is read as '
            "3000000000 GiB: aliyun.com/gpu-mem is a plain number of GiB, with no unit suffix; "
            "fix: write 3; the unit is GiB",
        ),
    ],
    ids=["spec number", "containers number", "container string", "byte suffix"],
)
def test_pod_demand_names_the_field_and_container(obj, message):
    with pytest.raises(Finding) as err:
        demand.pod_demand(obj)
    assert str(err.value).startswith(message)


def test_gpu_count_as_a_resource_is_refused_with_the_label_as_fix():
    with pytest.raises(Finding, match=r'set the pod label aliyun\.com/gpu-count: "2"'):
        demand.pod_demand(pod(ctr(limits={MEM: 4, "aliyun.com/gpu-count": 2})))


def test_whole_gpus_and_gpu_mem_in_one_container_are_refused():
    with pytest.raises(Finding, match=r"asks for whole GPUs \(nvidia\.com/gpu\)"):
        demand.pod_demand(pod(ctr(limits={MEM: 4, "nvidia.com/gpu": 1})))
    # Zero whole GPUs is no request for them.
    assert demand.pod_demand(pod(ctr(limits={MEM: 4, "nvidia.com/gpu": 0}))).total == 4


def test_messages_count_in_the_configured_unit():
    with pytest.raises(Finding, match="fix: write 3072; the unit is MiB"):
        demand.pod_demand(pod(ctr(limits={MEM: "3Gi"})), unit="MiB")
    with pytest.raises(Finding, match=r"fix: write 24; the unit is a block of 128 MiB"):
        demand.pod_demand(pod(ctr(limits={MEM: "3Gi"})), unit="128MiB")
    with pytest.raises(Finding, match="split the pod's 7 MiB"):
        demand.pod_demand(pod(ctr(limits={MEM: 7}), labels={"aliyun.com/gpu-count": "2"}), unit="MiB")


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from(["3", "3Gi", "0.5", "-1", "x"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["spec", "metadata", "containers", "resources", "limits", "labels", MEM, "name"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@given(spec=_JSON, metadata=_JSON)
def test_any_json_gives_a_demand_or_a_demand_error(spec, metadata):
    with contextlib.suppress(Finding):
        demand.pod_demand({"spec": spec, "metadata": metadata})


@given(units=st.lists(st.integers(0, 64), max_size=5), count=st.integers(1, 8))
def test_total_and_split_agree_with_arithmetic(units, count):
    p = pod(*(ctr(limits={MEM: str(u)}) for u in units), labels={"aliyun.com/gpu-count": str(count)})
    if sum(units) % count:
        with pytest.raises(Finding):
            demand.pod_demand(p)
    else:
        want = demand.pod_demand(p)
        assert want.total == sum(units)
        assert want.per_gpu * count == sum(units)


def test_the_webhook_and_the_extender_say_the_same_of_an_init_container_asking_too_much():
    obj = pod(ctr(limits={MEM: 2}, name="train"), init=[ctr(limits={MEM: 14}, name="warm")])
    with pytest.raises(Finding) as err:
        demand.pod_demand(obj)
    found = verdict.evaluate({"apiVersion": "v1", "kind": "Pod", **obj}, verdict.Policy())
    assert not found.allowed
    assert [str(v) for v in found.violations] == [str(err.value)]
    assert str(err.value).startswith(
        'spec.initContainers[0].resources.limits[aliyun.com/gpu-mem] (container "warm"): "14": '
    )


def test_a_sidecar_asking_gpu_memory_is_refused_by_the_webhook_and_the_extender_alike():
    sidecar = ctr(limits={MEM: 4}, name="proxy")
    sidecar["restartPolicy"] = "Always"  # native sidecar: runs beside the app containers
    obj = pod(ctr(limits={MEM: 4}, name="train"), init=[sidecar])
    with pytest.raises(Finding) as err:
        demand.pod_demand(obj)
    assert "a sidecar (an init container with restartPolicy: Always) asks aliyun.com/gpu-mem" in str(
        err.value
    )
    found = verdict.evaluate({"apiVersion": "v1", "kind": "Pod", **obj}, verdict.Policy())
    assert [str(v) for v in found.violations] == [str(err.value)]
    del sidecar["restartPolicy"]  # an ordinary init container of that size runs inside the app's share
    assert demand.pod_demand(obj).init_containers == (4,)
