"""Finding pod templates: every built-in kind, the common CRDs, paths, malformed shapes and bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.core.specs import finding, templates

MANIFESTS = Path(__file__).parent.parent / "data" / "manifests"


def spec(name: str = "c") -> dict[str, Any]:
    return {"containers": [{"name": name, "image": "x"}]}


def paths(obj: Any) -> list[str]:
    return [t.path for t in templates.find_pod_templates(obj)]


KINDS = [
    ("Pod", {"apiVersion": "v1", "kind": "Pod", "spec": spec()}, [""]),
    ("PodTemplate", {"apiVersion": "v1", "kind": "PodTemplate", "template": {"spec": spec()}}, ["template"]),
    (
        "ReplicationController",
        {"kind": "ReplicationController", "spec": {"template": {"spec": spec()}}},
        ["spec.template"],
    ),
    (
        "ReplicaSet",
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "spec": {"template": {"spec": spec()}}},
        ["spec.template"],
    ),
    (
        "Deployment",
        {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": spec()}}},
        ["spec.template"],
    ),
    (
        "StatefulSet",
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"template": {"spec": spec()}}},
        ["spec.template"],
    ),
    (
        "DaemonSet",
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "spec": {"template": {"spec": spec()}}},
        ["spec.template"],
    ),
    (
        "Job",
        {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": spec()}}},
        ["spec.template"],
    ),
    (
        "CronJob",
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "spec": {"jobTemplate": {"spec": {"template": {"spec": spec()}}}},
        },
        ["spec.jobTemplate.spec.template"],
    ),
]


@pytest.mark.parametrize(("obj", "expected"), [k[1:] for k in KINDS], ids=[k[0] for k in KINDS])
def test_builtin_kinds_have_their_template_at_the_documented_path(obj, expected):
    assert paths(obj) == expected


MANIFEST_PATHS = [
    (
        "pytorchjob-good.yaml",
        ["spec.pytorchReplicaSpecs.Master.template", "spec.pytorchReplicaSpecs.Worker.template"],
    ),
    ("raycluster-good.yaml", ["spec.headGroupSpec.template", "spec.workerGroupSpecs[0].template"]),
    ("jobset-good.yaml", ["spec.replicatedJobs[0].template.spec.template"]),
    (
        "leaderworkerset-good.yaml",
        ["spec.leaderWorkerTemplate.leaderTemplate", "spec.leaderWorkerTemplate.workerTemplate"],
    ),
    ("cronjob-good.yaml", ["spec.jobTemplate.spec.template"]),
    ("pod-good.yaml", [""]),
]


@pytest.mark.parametrize(("name", "expected"), MANIFEST_PATHS, ids=[m[0] for m in MANIFEST_PATHS])
def test_custom_resources_are_searched_by_structure(name, expected):
    obj = yaml.safe_load((MANIFESTS / name).read_text())
    assert paths(obj) == expected


def test_template_carries_its_metadata_and_spec():
    obj = {
        "kind": "Deployment",
        "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": spec("x")}},
    }
    (t,) = templates.find_pod_templates(obj)
    assert t.metadata == {"labels": {"a": "b"}}
    assert t.spec["containers"][0]["name"] == "x"
    assert t.field("spec.containers[0]") == "spec.template.spec.containers[0]"


def test_field_of_a_pod_is_relative_to_the_root():
    (t,) = templates.find_pod_templates({"kind": "Pod", "spec": spec()})
    assert (t.metadata, t.field("spec.containers[0]"), t.field("")) == ({}, "spec.containers[0]", "")
    assert templates.PodTemplate("a", {}, {}).field("[3]") == "a[3]"


def test_map_keys_with_dots_are_written_in_brackets():
    obj = {"kind": "Thing", "spec": {"my.key": {"template": {"spec": spec()}}, "list": [{"spec": spec()}]}}
    assert paths(obj) == ["spec[my.key].template", "spec.list[0]"]


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("a", "p.a"),
        ("a.b", "p[a.b]"),
        ("", "p[]"),
        ("a\nb", "p[a\\x0ab]"),
        (3, "p[3]"),
        (True, "p[true]"),
        (None, "p[null]"),
    ],
    ids=["plain", "dotted", "empty", "control", "index", "yaml bool key", "yaml null key"],
)
def test_key_path_spells_every_key_on_one_line(key, path):
    assert finding.key_path("p", key) == path


def test_nested_objects_that_only_resemble_templates_are_skipped():
    not_templates = {
        "kind": "Thing",
        "spec": {
            "a": {"spec": {"containers": "x"}},
            "b": {"spec": {"containers": ["x"]}},
            "c": {"spec": "x"},
            "d": {"containers": [{}]},
        },
    }
    assert paths(not_templates) == []


def test_templates_inside_a_template_are_not_searched():
    pod = {"kind": "Pod", "spec": {**spec(), "extra": {"template": {"spec": spec()}}}}
    assert paths(pod) == [""]


def test_template_with_an_empty_container_list_is_still_a_template():
    assert paths({"kind": "Job", "spec": {"template": {"spec": {"containers": []}}}}) == ["spec.template"]


MALFORMED = [
    (
        "pod spec is a string",
        {"apiVersion": "v1", "kind": "Pod", "spec": "x"},
        ("spec", "an object", "a string"),
    ),
    (
        "deployment template is a list",
        {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": []}},
        ("spec.template", "an object", "a list"),
    ),
    (
        "cronjob job template is a number",
        {"kind": "CronJob", "spec": {"jobTemplate": 3}},
        ("spec.jobTemplate", "an object", "a number"),
    ),
    ("job spec is null-ish list", {"kind": "Job", "spec": ["x"]}, ("spec", "an object", "a list")),
    (
        "template metadata is a string",
        {"kind": "Job", "spec": {"template": {"metadata": "x", "spec": spec()}}},
        ("spec.template.metadata", "an object", "a string"),
    ),
]


@pytest.mark.parametrize(("obj", "expected"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_wrong_types_on_a_known_template_path_are_reported(obj, expected):
    found = templates.scan(obj)
    assert [(m.path, m.expected, m.actual) for m in found.malformed] == [expected]


def test_known_kind_template_with_non_object_containers_is_still_found():
    # At a known path the rules report the bad container instead of skipping the template.
    assert paths({"kind": "Pod", "spec": {"containers": ["x"]}}) == [""]


@pytest.mark.parametrize("containers", [{}, 3, True, "x"], ids=["object", "number", "true", "string"])
def test_known_kind_template_whose_containers_is_no_list_is_found_for_the_rules_to_name(containers):
    # Not a scan finding: the rules name it through podspec, in the words the extender uses too.
    found = templates.scan({"kind": "Deployment", "spec": {"template": {"spec": {"containers": containers}}}})
    assert ([t.path for t in found.templates], found.malformed) == (["spec.template"], ())


def test_known_kind_of_another_api_group_is_searched_by_structure_only():
    obj = {"apiVersion": "example.com/v1", "kind": "Deployment", "spec": {"template": []}}
    assert templates.scan(obj).malformed == ()


def test_absent_template_is_not_malformed():
    assert templates.scan({"kind": "Deployment", "spec": {}}) == templates.Scan((), (), None)


def test_deep_nesting_stops_at_the_depth_limit():
    deep: dict[str, Any] = {"spec": spec()}
    for _ in range(templates.MAX_DEPTH + 5):
        deep = {"x": deep}
    found = templates.scan(deep)
    assert found.templates == ()
    assert found.truncated is not None and found.truncated.startswith("x.x.x")


def test_template_just_within_the_depth_limit_is_found():
    deep: dict[str, Any] = {"spec": spec()}
    for _ in range(templates.MAX_DEPTH - 1):
        deep = {"x": deep}
    found = templates.scan(deep)
    assert len(found.templates) == 1 and found.truncated is None


def test_recursive_yaml_terminates():
    obj = yaml.safe_load("a: &a [*a]\n")
    found = templates.scan({"kind": "Thing", **obj})
    assert found.truncated is not None


def test_exponential_yaml_aliases_stop_at_the_node_budget():
    text = "l0: &l0 [{}, {}]\n" + "".join(
        f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}, *l{i - 1}, *l{i - 1}]\n" for i in range(1, 20)
    )
    found = templates.scan(yaml.safe_load(text))
    assert found.truncated is not None


def test_wide_objects_are_walked_lazily_within_the_budget():
    obj = {"kind": "List", "items": [{"spec": spec()} for _ in range(1000)]}
    assert len(templates.find_pod_templates(obj)) == 1000


def test_non_object_input_has_no_templates():
    assert templates.find_pod_templates([1, 2]) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("abc", 0, "abc"),
        ("a\tb", 0, "a\\x09b"),
        ("\u202eevil", 0, "\\u202eevil"),
        ("abcdef", 4, "abc…"),
        ("\ud800", 0, "\\ud800"),
    ],
    ids=["plain", "tab", "bidi override", "clipped", "lone surrogate"],
)
def test_printable_escapes_and_clips(text, limit, expected):
    assert finding.printable(text, limit) == expected


def _huge_managed_fields(entries: int) -> dict[str, Any]:
    fields: dict[str, Any] = {"f:metadata": {"f:labels": {f"f:k{i}": {} for i in range(entries)}}}
    return {"name": "d", "managedFields": [{"manager": "kubectl", "fieldsV1": fields}]}


def test_a_large_metadata_does_not_spend_the_walk_before_the_template():
    # The object's metadata (here a managedFields list larger than the walk's budget) comes first in the
    # document and can hold no pod template: a Deployment's template was left unchecked behind it.
    spec = {"containers": [{"name": "t", "image": "x"}]}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _huge_managed_fields(templates.MAX_NODES + 1),
        "spec": {"template": {"spec": spec}},
    }
    found = templates.scan(deployment)
    assert [t.path for t in found.templates] == ["spec.template"] and found.truncated is None
    custom = {"apiVersion": "x.io/v1", "kind": "Trainer", "metadata": deployment["metadata"]}
    custom["spec"] = {"worker": {"template": {"spec": spec}}}
    found = templates.scan(custom)
    assert [t.path for t in found.templates] == ["spec.worker.template"] and found.truncated is None


def test_a_known_kinds_template_is_checked_whatever_comes_before_it():
    spec = {"containers": [{"name": "t", "image": "x"}]}
    filler = {f"k{i}": {"x": i} for i in range(templates.MAX_NODES)}  # a large field before spec
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "aaa": filler,
        "spec": {"template": {"spec": spec}},
    }
    found = templates.scan(deployment)
    assert [t.path for t in found.templates] == ["spec.template"]
    assert found.truncated is not None  # what it could not search is still said
