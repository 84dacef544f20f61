"""The `cgpu.disable.isolation` nodeSelector decision for a gpu-mem pod: annotation, CGPU_DISABLE, default.

A gpu-mem pod without this selector can land in the isolating or the non-isolating node pool; the
webhook pins it to one (the gpushare docs: "strongly recommended to set nodeSelector").
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from webhook.core.specs import finding, specview, templates
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources

_BOOLS = ("true", "false")
# An env entry's name, from C: JSON entries that are objects are the only values with a `get`.
_NAME_OF = operator.methodcaller("get", "name")
_NAME_LIMIT = 40
# Any value of the label other than true/false: pods that allow it may land on non-gpushare nodes.
_OTHER = "<other>"


@dataclass(frozen=True, slots=True)
class IsolationPolicy:
    label_key: str = resources.ISOLATION_KEY  # the nodeSelector key
    annotation_key: str = resources.ISOLATION_KEY  # the pod annotation that chooses
    env_name: str = resources.CGPU_DISABLE_ENV
    default: str = "false"  # the value when nothing in the pod says otherwise


class IsolationDecision(NamedTuple):  # a NamedTuple: built per review, cheaper than a frozen dataclass
    value: str | None  # "true"/"false" to add to nodeSelector; None: nothing to add
    warnings: tuple[str, ...] = ()
    violation: Finding | None = None  # e.g. annotation value "maybe"


class _WrongType(Exception):
    def __init__(self, violation: Finding) -> None:
        super().__init__(str(violation))
        self.violation = violation


def _get(
    node: Mapping[str, Any],
    key: str,
    expected: type | tuple[type, ...],
    path: str,
    what: str,
    *,
    container: Mapping[str, Any] | None = None,
) -> Any:
    """`node[key]` if it has the `expected` type, None when absent; else raise a wrong-type violation,
    naming `container` (its body) when the field is in one."""
    value = node.get(key)
    if value is None or isinstance(value, expected):
        return value
    who = None if container is None else _container_name(container)  # built only for the violation
    raise _WrongType(finding.wrong_type(finding.key_path(path, key), who, value, what))


def gpu_memory_containers(
    spec: Mapping[str, Any], names: resources.GpuResourceNames
) -> list[Mapping[str, Any]]:
    """The containers and init containers that ask for GPU memory, in spec order."""
    return [c.body for c in specview.read(templates.PodTemplate("", {}, spec), names).memory_holders]


def asks_gpu_memory(spec: Mapping[str, Any], names: resources.GpuResourceNames) -> bool:
    return specview.read(templates.PodTemplate("", {}, spec), names).asks_memory()


def _container_name(container: Mapping[str, Any]) -> str:
    name = container.get("name")
    return finding.printable(name, _NAME_LIMIT) if isinstance(name, str) else "?"


def _env_setting(body: Mapping[str, Any], path: str, env_name: str, warnings: list[str]) -> str | None:
    """The CGPU_DISABLE of the container `body` at `path`: "true", "false", or None (unset or not
    readable, with a warning)."""
    env = body.get("env")
    if env is None:
        return None
    if type(env) is list:
        try:
            if env_name not in map(_NAME_OF, env):
                return None  # most containers: every entry an object, none of this name
        except AttributeError:  # an entry that is no object: named below
            pass
    else:
        _get(body, "env", list, path, "a list of env vars", container=body)
    setting: str | None = None
    for i, item in enumerate(env):
        if not isinstance(item, templates.OBJECT):
            raise _WrongType(
                finding.wrong_type(f"{path}.env[{i}]", _container_name(body), item, "an object (an env var)")
            )
        if item.get("name") != env_name:
            continue
        # The last entry of a name wins, as in the kubelet.
        value = _get(item, "value", str, f"{path}.env[{i}]", "a string", container=body)
        if item.get("valueFrom") is not None:
            name = _container_name(body)
            warnings.append(f'{env_name} of container "{name}" comes from valueFrom; assumed not "true"')
            setting = None
        elif not value:
            setting = None
        elif value.lower() in _BOOLS:
            setting = value.lower()
        else:
            shown, name = finding.printable(value, 20), _container_name(body)
            warnings.append(
                f'{env_name}="{shown}" of container "{name}" is not true or false; assumed not "true"'
            )
            setting = None
    return setting


class _Affinity(NamedTuple):
    allowed: set[str] | None  # label values the required terms allow for the key; None: no term names it
    pinned: str | None  # a node every term pins the pod to by name (a DaemonSet's pods), else None


_NO_AFFINITY = _Affinity(None, None)


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _no_required_terms(affinity: object) -> bool:
    """Affinity that holds no required node terms, read on the happy path only: objects all the way
    (most pods with affinity only prefer nodes, or place themselves among other pods)."""
    if type(affinity) is not dict:
        return False
    node = affinity.get("nodeAffinity")
    return node is None or (type(node) is dict and node.get(_REQUIRED) is None)


def _required_affinity(spec: Mapping[str, Any], key: str, path: str) -> _Affinity:
    """What the required node affinity says about `key`, and whether it places the pod by node name."""
    if _no_required_terms(spec.get("affinity")):
        return _NO_AFFINITY
    affinity = _get(spec, "affinity", templates.OBJECT, path, "an object")
    if affinity is None:
        return _Affinity(None, None)
    path = finding.join(path, "affinity")  # plain keys: join spells them as key_path does
    node = _get(affinity, "nodeAffinity", templates.OBJECT, path, "an object")
    if node is None:
        return _Affinity(None, None)
    path = finding.join(path, "nodeAffinity")
    required = _get(node, _REQUIRED, templates.OBJECT, path, "an object")
    if required is None:
        return _Affinity(None, None)
    path = finding.join(path, _REQUIRED)
    terms = _get(required, "nodeSelectorTerms", list, path, "a list")
    allowed: set[str] = set()
    named = False
    nodes: list[str | None] = []
    for t, term in enumerate(terms or ()):
        term_path = f"{path}.nodeSelectorTerms[{t}]"
        if not isinstance(term, templates.OBJECT):
            raise _WrongType(finding.wrong_type(term_path, None, term, "an object"))
        values, constrained = _term_values(term, key, term_path)
        named = named or constrained
        # Terms are ORed: one that leaves the key alone allows every value.
        allowed |= values
        nodes.append(_pinned_node(term))
    pinned = nodes[0] if len(set(nodes)) == 1 else None  # the same node in every term (None: no pin)
    return _Affinity(allowed if named else None, pinned)


def _term_values(term: Mapping[str, Any], key: str, term_path: str) -> tuple[set[str], bool]:
    """The values of `key` one nodeSelectorTerm allows (its expressions are ANDed), and whether any
    expression names the key."""
    exprs = _get(term, "matchExpressions", list, term_path, "a list")
    values = {*_BOOLS, _OTHER}
    constrained = False
    for e, expr in enumerate(exprs or ()):
        if not isinstance(expr, templates.OBJECT):
            raise _WrongType(
                finding.wrong_type(f"{term_path}.matchExpressions[{e}]", None, expr, "an object")
            )
        if expr.get("key") != key:
            continue
        constrained = True
        listed = expr.get("values")
        named = {v for v in listed if isinstance(v, str)} if isinstance(listed, list) else set()
        operator = expr.get("operator")
        if operator == "In":
            values &= named
        elif operator == "NotIn":
            values -= named
        elif operator != "Exists":
            values = set()  # DoesNotExist, Gt, Lt: no true/false node
    return values, constrained


def _pinned_node(term: Mapping[str, Any]) -> str | None:
    """The one node a term's `matchFields: metadata.name In [node]` names: how the DaemonSet controller
    places its pods (k8s.io/kubernetes pkg/controller/daemon/util ReplaceDaemonSetPodNodeNameNodeAffinity).
    Several names leave the scheduler a choice: no pin."""
    fields = term.get("matchFields")
    for expr in fields if isinstance(fields, list) else ():
        if not isinstance(expr, templates.OBJECT):
            continue
        values = expr.get("values")
        if (
            expr.get("key") == "metadata.name"
            and expr.get("operator") == "In"
            and isinstance(values, list)
            and len(values) == 1
            and isinstance(values[0], str)
        ):
            return values[0]
    return None


def _annotation(view: specview.SpecView, key: str) -> str | None:
    annotations = view.annotations
    if annotations is not None and not isinstance(annotations, templates.OBJECT):
        path = finding.key_path(finding.join(view.path, "metadata"), "annotations")
        raise _WrongType(finding.wrong_type(path, None, annotations, "an object"))
    if annotations is None or key not in annotations:
        return None
    raw = annotations[key]
    path = finding.key_path(finding.join(view.path, "metadata.annotations"), key)
    if not isinstance(raw, str):
        raise _WrongType(finding.wrong_type(path, None, raw, 'a string: "true" or "false" in quotes'))
    value = raw.strip().lower()
    if value not in _BOOLS:
        raise _WrongType(
            Finding(
                path,
                None,
                finding.show(raw),
                'is not an allowed value; allowed: "true" (isolation off) or "false" (GPU memory isolated)',
                f'set annotation {key} to "true" or "false", or remove it',
            )
        )
    return value


def _source(policy: IsolationPolicy, annotation: str | None, env: str | None) -> str:
    """What chose the signal, in words; built only for a warning that names it."""
    if annotation is not None:
        return f"annotation {policy.annotation_key}={annotation}"
    return f"{policy.env_name}={env}"


def _decide(view: specview.SpecView, policy: IsolationPolicy) -> IsolationDecision:
    # Misshapen lists and items are skipped: the rules deny them, naming the field.
    indexed = view.memory_holders
    if not indexed:
        return IsolationDecision(None)
    key, spec = policy.label_key, view.template.spec  # a field: view.spec is a call more
    warnings: list[str] = []
    spec_path = view.spec_path
    # Read in this order (the first misshapen field is the one reported); absent ones cost no call.
    selector = spec.get("nodeSelector")
    if selector is not None:
        selector = _get(spec, "nodeSelector", templates.OBJECT, spec_path, "an object (label: value)")
    written = spec.get("affinity")
    if written is None or _no_required_terms(written):  # most pods: no required node terms
        affinity = _NO_AFFINITY
    else:
        affinity = _required_affinity(spec, key, spec_path)
    notes = view.annotations
    # Read only where there is something to read: absent, or an object without the key (most pods).
    absent = notes is None or (type(notes) is dict and policy.annotation_key not in notes)
    annotation = None if absent else _annotation(view, policy.annotation_key)
    settings = [_env_setting(c.body, c.path, policy.env_name, warnings) for c in indexed]
    every_true = settings.count("true") == len(settings)
    env_signal = "true" if every_true else "false" if "false" in settings else None
    from_env = "true" if every_true else "false" if "false" in settings else policy.default
    signal = env_signal if annotation is None else annotation

    if selector is not None and key in selector:
        current = selector[key]
        shown = finding.printable(finding.show(current), 20)
        if current not in _BOOLS:
            warnings.append(f"nodeSelector {key}={shown} matches no gpushare node pool (use true or false)")
        elif signal is not None and signal != current:
            why = _source(policy, annotation, env_signal)
            warnings.append(f"nodeSelector {key}={shown} is kept although {why}")
        return IsolationDecision(None, tuple(warnings))
    if affinity.allowed is not None:
        if signal is not None and signal not in affinity.allowed:
            why = _source(policy, annotation, env_signal)
            warnings.append(f"required node affinity on {key} is kept although {why}")
        return IsolationDecision(None, tuple(warnings))
    node_name = spec.get("nodeName")
    if isinstance(node_name, str) and node_name:
        # Placed without the scheduler: a selector the node's label does not match makes the kubelet
        # refuse the pod (NodeAffinity), so none is added; the node's pool is the user's choice.
        shown = finding.printable(node_name, 60)
        warnings.append(f"spec.nodeName={shown} places the pod itself: no nodeSelector {key} added")
        return IsolationDecision(None, tuple(warnings))
    if affinity.pinned is not None:
        # A DaemonSet's pod: its controller chose the node without our selector, so one the node's label
        # does not match would leave the pod Pending there for good.
        shown = finding.printable(affinity.pinned, 60)
        warnings.append(f"node affinity pins the pod to node {shown}: no nodeSelector {key} added")
        return IsolationDecision(None, tuple(warnings))
    if annotation is not None:
        if env_signal is not None and env_signal != annotation:
            warnings.append(
                f"annotation {policy.annotation_key}={annotation} overrides {policy.env_name}={env_signal}"
            )
        return IsolationDecision(annotation, tuple(warnings))
    if not every_true and "true" in settings:
        # Name the containers that lack it: the fix is to set it there (or drop it elsewhere).
        lacking = [
            f'"{_container_name(c.body)}"' for c, s in zip(indexed, settings, strict=True) if s != "true"
        ]
        warnings.append(
            f"{policy.env_name}=true is not set in gpu-mem container {', '.join(lacking)}; "
            f"using {key}={from_env}"
        )
    return IsolationDecision(from_env, tuple(warnings))


def decide(
    template: templates.PodTemplate,
    policy: IsolationPolicy,
    names: resources.GpuResourceNames,
    view: specview.SpecView | None = None,
) -> IsolationDecision:
    """What the webhook adds to the nodeSelector of this template's pods, with warnings on assumptions.

    Order: an existing selector or required affinity on the key wins (nothing added); then the pod
    annotation; then "true" when every gpu-mem container sets CGPU_DISABLE=true; "false" when one
    says "false"; else `policy.default`. `view` is the template's view (specview.read) when the caller
    has it.
    """
    return decide_view(view or specview.read(template, names), policy)


def decide_view(view: specview.SpecView, policy: IsolationPolicy) -> IsolationDecision:
    """`decide` of a template whose view is read: the verdict's call, one view for every rule."""
    try:
        return _decide(view, policy)
    except _WrongType as err:
        return IsolationDecision(None, (), err.violation)
