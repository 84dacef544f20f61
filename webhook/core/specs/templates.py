"""Find the pod templates of any object: Pods, workloads, CronJobs and custom resources by structure.

The walk is bounded: objects arrive from the network. Its paths are written as every finding writes
them (core.specs.finding: `spec.x[0].y`, map keys with dots in brackets).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from webhook.core.specs.finding import join, json_type, key_path

# A pod template in any real object sits a few levels deep (JobSet: 5); YAML aliases can make an object
# recursive or exponentially large, so the walk stops at these bounds instead.
MAX_DEPTH = 32
MAX_NODES = 100_000

# `isinstance(x, OBJECT)` means `isinstance(x, Mapping)`, but decoded JSON objects are dicts, and an exact
# type match skips ABCMeta.__instancecheck__ (~100 ns; a review makes dozens of these checks).
OBJECT = (dict, Mapping)
_OBJECT_OR_LIST = (dict, list, Mapping)

# (API group, kind) -> where its one pod template lives. Other objects are searched by structure only.
KNOWN_TEMPLATE_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): (),
    ("", "PodTemplate"): ("template",),
    ("", "ReplicationController"): ("spec", "template"),
    ("apps", "ReplicaSet"): ("spec", "template"),
    ("apps", "Deployment"): ("spec", "template"),
    ("apps", "StatefulSet"): ("spec", "template"),
    ("apps", "DaemonSet"): ("spec", "template"),
    ("batch", "Job"): ("spec", "template"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template"),
}


# PodTemplate and Scan are NamedTuples, not frozen dataclasses: each review builds one of each, and a
# frozen dataclass's __init__ (one object.__setattr__ per field) costs ~0.3 us more.
class PodTemplate(NamedTuple):
    path: str  # "" for a Pod, "spec.template" for a Deployment, "spec.jobTemplate.spec.template" ...
    metadata: Mapping[str, Any]  # labels, annotations ({} when absent)
    spec: Mapping[str, Any]  # the pod spec

    def field(self, sub: str) -> str:
        """`field("spec.containers[0]")` -> "spec.template.spec.containers[0]" for a Deployment."""
        return join(self.path, sub)


@dataclass(frozen=True, slots=True)
class Malformed:
    """A field on the way to (or in) a pod template whose JSON type is wrong."""

    path: str
    expected: str  # "an object", "a list"
    actual: str  # the JSON type found, e.g. "a string"


class Scan(NamedTuple):
    templates: tuple[PodTemplate, ...]
    malformed: tuple[Malformed, ...]
    truncated: str | None  # where the walk gave up (too deep or too large); None when complete


def _api_group(obj: Mapping[str, Any]) -> str | None:
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str):
        return None
    return api_version.rpartition("/")[0]


def _known_path(obj: Mapping[str, Any]) -> tuple[str, ...] | None:
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return None
    group = _api_group(obj)
    for (known_group, known_kind), parts in KNOWN_TEMPLATE_PATHS.items():
        if kind == known_kind and group in (None, known_group):
            return parts
    return None


def _looks_like_template(node: Mapping[str, Any], loose: bool) -> bool:
    """A pod template has a `spec` with a `containers` list of objects; at a known kind's path (`loose`)
    any `containers` value will do, so the rules name a wrong one as they name a wrong `initContainers`."""
    spec = node.get("spec")
    if not isinstance(spec, OBJECT):
        return False
    containers = spec.get("containers")
    if loose:
        return containers is not None
    return isinstance(containers, list) and all(isinstance(c, OBJECT) for c in containers)


def _known_shape(
    obj: Mapping[str, Any], parts: tuple[str, ...]
) -> tuple[str, Malformed | None, Mapping[str, Any] | None]:
    """Follow a known kind's template path; report the first field there that has the wrong type. Also
    the object found at the end of the path (None when the path ends early)."""
    node: object = obj
    path = ""
    for part in parts:
        assert isinstance(node, OBJECT)
        node = node.get(part)
        path = key_path(path, part)
        if node is None:
            return path, None, None
        if not isinstance(node, OBJECT):
            return path, Malformed(path, "an object", json_type(node)), None
    assert isinstance(node, OBJECT)
    spec = node.get("spec")
    if spec is not None and not isinstance(spec, OBJECT):
        return path, Malformed(join(path, "spec"), "an object", json_type(spec)), node
    return path, None, node  # a misshapen `containers` is the rules' to name (podspec), as the extender does


def _children(node: object) -> Iterator[tuple[object, object]]:
    if isinstance(node, OBJECT):
        return ((k, v) for k, v in node.items() if isinstance(v, _OBJECT_OR_LIST))
    if isinstance(node, list):
        return ((i, v) for i, v in enumerate(node) if isinstance(v, _OBJECT_OR_LIST))
    return iter(())


def scan(obj: Mapping[str, Any]) -> Scan:
    """Every pod template in `obj` in document order (depth first), plus the wrongly typed fields seen."""
    if obj.get("kind") == "Pod" and _api_group(obj) in (None, ""):
        # Most objects reviewed: a Pod whose spec has containers is its own one template, as below.
        spec, metadata = obj.get("spec"), obj.get("metadata")
        if type(spec) is dict and spec.get("containers") is not None and type(metadata) is dict:
            return Scan((PodTemplate("", metadata, spec),), (), None)
    malformed: list[Malformed] = []
    known: str | None = None
    template: Mapping[str, Any] | None = None
    parts = _known_path(obj)
    if parts is not None:
        known, problem, template = _known_shape(obj, parts)
        if problem is not None:
            malformed.append(problem)
    found: list[PodTemplate] = []
    truncated: str | None = None

    def visit(node: Mapping[str, Any], path: str) -> bool:
        if not _looks_like_template(node, loose=path == known):
            return False
        metadata = node.get("metadata")
        if metadata is not None and not isinstance(metadata, OBJECT):
            malformed.append(Malformed(join(path, "metadata"), "an object", json_type(metadata)))
        found.append(PodTemplate(path, metadata if isinstance(metadata, OBJECT) else {}, node["spec"]))
        return True

    if visit(obj, ""):
        return Scan(tuple(found), tuple(malformed), None)
    # A known kind's template first, where it is: what comes before it in the document (a managedFields
    # list of 100,000 entries) must not spend the budget and leave it unchecked.
    seen = ""
    if template is not None and known is not None and visit(template, known):
        seen = known
    budget = MAX_NODES
    # Depth-first with one lazy iterator per open container: memory grows with depth, not with width.
    stack: list[tuple[str, int, Iterator[tuple[object, object]]]] = [("", 0, _children(obj))]
    while stack:
        path, depth, items = stack[-1]
        item = next(items, None)
        if item is None:
            stack.pop()
            continue
        key, child = item
        if not depth and key == "metadata":
            continue  # the object's own metadata holds no pod template, however large
        child_path = key_path(path, key)
        if child_path == seen:
            continue
        budget -= 1
        if budget < 0:
            truncated = child_path
            break
        if isinstance(child, OBJECT) and visit(child, child_path):
            continue
        if depth + 1 >= MAX_DEPTH:
            truncated = truncated or child_path
            continue
        stack.append((child_path, depth + 1, _children(child)))
    return Scan(tuple(found), tuple(malformed), truncated)


def find_pod_templates(obj: Mapping[str, Any]) -> list[PodTemplate]:
    """The pod templates of `obj`: itself for a Pod, `spec.template` for workloads, any nested one in CRs."""
    if not isinstance(obj, OBJECT):
        return []
    return list(scan(obj).templates)
