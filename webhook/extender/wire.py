"""kube-scheduler extender v1 JSON: requests read with keys matched case-insensitively, replies PascalCase.

Pure: bytes/dicts in, dicts out. The Go types carry no json tags, so the keys are the Go field names and
absent pointers/maps are `null` (as Go's encoding/json writes k8s.io/kube-scheduler extender/v1 types). Both
`nodeCacheCapable` modes are handled here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from webhook.core.specs import finding
from webhook.serving import jsonbody


class WireError(ValueError):
    """A request body that is not the extender JSON kube-scheduler sends; the message says what is wrong."""


class NodeList(TypedDict):
    metadata: dict[str, Any]
    items: list[Mapping[str, Any]]


class FilterResult(TypedDict):
    Nodes: NodeList | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str] | None
    FailedAndUnresolvableNodes: dict[str, str] | None
    Error: str


class HostPriority(TypedDict):
    Host: str
    Score: int


class BindingResult(TypedDict):
    Error: str


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """Filter/prioritize input. `nodes` is None when the scheduler sent only names (nodeCacheCapable)."""

    pod: Mapping[str, Any]
    node_names: tuple[str, ...]
    nodes: tuple[Mapping[str, Any], ...] | None = None

    @property
    def node_cache_capable(self) -> bool:
        return self.nodes is None


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str

    @property
    def key(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}"


def parse_json(body: bytes) -> Any:
    """The body as the webhook reads a review (strict JSON, wide numbers as floats), in words on error."""
    try:
        return jsonbody.decode(body)
    except jsonbody.TooDeep:
        # No Pod or Node is nested anywhere near a thousand levels deep.
        raise WireError("request body is nested too deeply to be ExtenderArgs") from None
    except jsonbody.DecodeError as err:
        raise WireError(f"request body is not JSON: {err}") from None


def _field(obj: Mapping[str, Any], name: str) -> Any:
    """Go encoding/json: the exact key wins, else the first case-insensitive match."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for key, value in obj.items():
        if isinstance(key, str) and key.lower() == lowered:
            return value
    return None


def _object(body: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise WireError(f"{what} must be a JSON object, got {finding.json_type(body)}")
    return body


def extender_args(body: Any) -> ExtenderArgs:
    """ExtenderArgs: `{"Pod": {...}, "Nodes": {"items": [...]} | null, "NodeNames": [...] | null}`."""
    obj = _object(body, "ExtenderArgs")
    pod = _object(_field(obj, "Pod"), "ExtenderArgs.Pod")
    raw_nodes = _field(obj, "Nodes")
    raw_names = _field(obj, "NodeNames")
    if raw_nodes is not None:
        items = _object(raw_nodes, "ExtenderArgs.Nodes").get("items") or []
        if not isinstance(items, list) or not all(isinstance(n, Mapping) for n in items):
            raise WireError("ExtenderArgs.Nodes.items must be a list of Node objects")
        names = []
        for i, n in enumerate(items):
            metadata = n.get("metadata")
            name = metadata.get("name") if isinstance(metadata, Mapping) else None
            if not isinstance(name, str) or not name:
                raise WireError(f"ExtenderArgs.Nodes.items[{i}].metadata.name must be a non-empty string")
            names.append(name)
        return ExtenderArgs(pod=pod, node_names=tuple(names), nodes=tuple(items))
    if raw_names is None:
        return ExtenderArgs(pod=pod, node_names=())
    # type() over the whole list in C: thousands of names per call (JSON never yields str subclasses).
    if not isinstance(raw_names, list) or not set(map(type, raw_names)) <= {str}:
        raise WireError("ExtenderArgs.NodeNames must be a list of strings")
    return ExtenderArgs(pod=pod, node_names=tuple(raw_names))


def binding_args(body: Any) -> BindingArgs:
    """ExtenderBindingArgs: `{"PodName", "PodNamespace", "PodUID", "Node"}`, all strings."""
    obj = _object(body, "ExtenderBindingArgs")
    values = {}
    for name in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = _field(obj, name)
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise WireError(f"ExtenderBindingArgs.{name} must be a string")
        values[name] = value
    for required in ("PodName", "Node"):
        if not values[required]:
            raise WireError(f"ExtenderBindingArgs.{required} is empty")
    return BindingArgs(
        pod_name=values["PodName"],
        pod_namespace=values["PodNamespace"] or "default",
        pod_uid=values["PodUID"],
        node=values["Node"],
    )


def filter_result(
    args: ExtenderArgs,
    passed: Sequence[str],
    failed: Mapping[str, str] | None = None,
    unresolvable: Mapping[str, str] | None = None,
) -> FilterResult:
    """The reply in the mode the scheduler asked in: NodeNames, or Nodes.items (the passing Node objects)."""
    if args.nodes is None:
        nodes: NodeList | None = None
        names: list[str] | None = list(passed)
    else:
        keep = set(passed)
        nodes = {"metadata": {}, "items": [n for n in args.nodes if n["metadata"]["name"] in keep]}
        names = None
    return {
        "Nodes": nodes,
        "NodeNames": names,
        "FailedNodes": dict(failed) if failed else None,
        "FailedAndUnresolvableNodes": dict(unresolvable) if unresolvable else None,
        "Error": "",
    }


def filter_error(message: str) -> FilterResult:
    """A filter failure: no node passes and the scheduler reports `message`."""
    return {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": None,
        "FailedAndUnresolvableNodes": None,
        "Error": message,
    }


def host_priority_list(scores: Mapping[str, int]) -> list[HostPriority]:
    return [{"Host": host, "Score": score} for host, score in scores.items()]


def binding_result(error: str = "") -> BindingResult:
    return {"Error": error}
