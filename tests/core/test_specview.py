"""The view of one pod template: built once, read by every rule; each GPU quantity parsed once; the same
view gives the webhook's verdict and the extender's demand."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.admission import verdict
from webhook.core.specs import demand, podspec, specview, templates
from webhook.core.wire import quantity, resources

NAMES = resources.GpuResourceNames()
MEM = "aliyun.com/gpu-mem"


def ctr(name: str, limits: dict[str, Any], requests: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "resources": {"limits": limits, "requests": dict(limits if requests is None else requests)},
    }


def pod(
    *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), labels: Any = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers), "initContainers": list(init)}
    metadata = {"name": "p", "labels": labels or {}, "annotations": {"a": "b"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def test_a_review_parses_each_gpu_value_once_whatever_the_rules_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # Rules, the gpu-count split, init containers' memory, isolation and the mixed-pod rule all read
    # gpu-mem here; each value is parsed once: the limit, and the request when the limit is there too.
    # JSON numbers: no parse of a spelling is remembered across reviews (strings are), so every parse
    # of this review reaches from_json. (Before the view: 15.)
    parsed: list[object] = []
    real = quantity.from_json

    def counting(raw: object) -> quantity.Quantity:
        parsed.append(raw)
        return real(raw)

    monkeypatch.setattr(quantity, "from_json", counting)
    obj = pod(
        ctr("a", {MEM: 2}),
        ctr("b", {MEM: 2, "cpu": "1"}),
        init=(ctr("i", {MEM: 1}),),
        labels={resources.GPU_COUNT_LABEL: "2"},
    )
    found = verdict.evaluate(obj, verdict.Policy(scheduler_name="gpushare-scheduler"))
    assert found.allowed, found.message()
    assert found.templates[0].isolation == "false"
    assert sorted(parsed, key=repr) == [1, 1, 2, 2, 2, 2]  # three containers, a limit and a request each


def test_the_extenders_demand_is_read_from_the_same_view() -> None:
    obj = pod(ctr("a", {MEM: "4"}), ctr("b", {"cpu": "1"}), init=(ctr("i", {MEM: "3"}),))
    view = specview.read(templates.PodTemplate("", obj["metadata"], obj["spec"]), NAMES)
    assert demand.of_view(view) == demand.pod_demand(obj) == demand.Demand((4, 0), (3,), 1)


def test_the_view_holds_the_metadata_as_written_and_which_items_are_containers() -> None:
    spec = {"containers": [{"name": "a"}, 7], "initContainers": None}
    view = specview.read(templates.PodTemplate("spec.template", {"labels": 3}, spec), NAMES)
    assert view.labels == 3 and view.annotations is None
    assert view.misshapen
    assert [c.path for c in view.containers] == ["spec.template.spec.containers[0]"]
    assert [type(i) for i in view.items] == [podspec.Container, podspec.WrongShape]


@pytest.mark.parametrize(
    ("limits", "memory", "cards"),
    [
        ({MEM: "4"}, True, False),
        ({MEM: "0"}, False, False),
        (
            {MEM: "four"},
            False,
            False,
        ),  # unreadable: no memory asked (the rules deny it), as isolation reads it
        ({MEM: 10**5000}, True, False),  # too large to parse: positive
        ({"nvidia.com/gpu": "1"}, False, True),
        ({"nvidia.com/gpu": "one"}, False, True),  # unreadable cards count as asking
    ],
    ids=["memory", "zero", "unreadable-memory", "huge-memory", "cards", "unreadable-cards"],
)
def test_what_the_pod_asks_is_read_from_its_containers(
    limits: dict[str, Any], memory: bool, cards: bool
) -> None:
    view = specview.read(templates.PodTemplate("", {}, {"containers": [ctr("a", limits)]}), NAMES)
    assert (view.asks_memory(), view.asks_cards()) == (memory, cards)
