"""Wire shapes of the Kubernetes API stand-in: served resource types, v1 Status errors, merge patch and
label/field selectors (see webhook/devcluster/standin/apiserver.py).
"""

from __future__ import annotations

import copy
import datetime
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

MERGE_PATCH = ("application/merge-patch+json", "application/strategic-merge-patch+json")
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True, slots=True)
class ResourceType:
    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    has_status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("pods", "Pod", "", "v1", True, has_status=True),
    ResourceType("nodes", "Node", "", "v1", False, has_status=True),
    ResourceType("events", "Event", "", "v1", True),
    ResourceType("configmaps", "ConfigMap", "", "v1", True),
    ResourceType("secrets", "Secret", "", "v1", True),
    ResourceType("namespaces", "Namespace", "", "v1", False),
    ResourceType("resourcequotas", "ResourceQuota", "", "v1", True, has_status=True),  # inspect --namespaces
    ResourceType("leases", "Lease", "coordination.k8s.io", "v1", True),
    # The DRA driver's objects (tests/dra): its node's slice, the claims it prepares.
    ResourceType("resourceslices", "ResourceSlice", "resource.k8s.io", "v1", False),
    ResourceType("resourceclaims", "ResourceClaim", "resource.k8s.io", "v1", True, has_status=True),
    ResourceType(
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        "admissionregistration.k8s.io",
        "v1",
        False,
    ),
    ResourceType(
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        "admissionregistration.k8s.io",
        "v1",
        False,
    ),
)
BY_PLURAL = {r.plural: r for r in RESOURCES}

REASONS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiStatusError(Exception):
    """An API error, answered as a v1 Status with this code and reason."""

    def __init__(self, code: int, message: str, reason: str = "", details: Obj | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def success_status(code: int = 200, details: Obj | None = None) -> Obj:
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if details is not None:
        body["details"] = details
    return body


def conflict(rt: ResourceType, name: str, why: str) -> ApiStatusError:
    return ApiStatusError(
        409,
        f'Operation cannot be fulfilled on {rt.plural} "{name}": {why}',
        "Conflict",
        {"name": name, "kind": rt.plural},
    )


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch; returns a new value and shares untouched subtrees of `target`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- selectors -------------------------------------------------------------------------------------


def _split_terms(text: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(text[start:i].strip())
            start = i + 1
    terms.append(text[start:].strip())
    return [t for t in terms if t]


def parse_label_selector(text: str) -> list[tuple[str, str, frozenset[str]]]:
    """`a=b,c!=d,e,!f,g in (x,y),h notin (z)` -> [(key, op, values)]; op in = != exists !exists in notin."""
    out: list[tuple[str, str, frozenset[str]]] = []
    for term in _split_terms(text):
        for word in (" notin ", " in "):
            if word in term:
                key, _, rest = term.partition(word)
                rest = rest.strip()
                if not (rest.startswith("(") and rest.endswith(")")):
                    raise ApiStatusError(400, f"unable to parse requirement: {term!r}")
                values = frozenset(v.strip() for v in rest[1:-1].split(",") if v.strip())
                out.append((key.strip(), word.strip(), values))
                break
        else:
            if "!=" in term:
                key, _, value = term.partition("!=")
                out.append((key.strip(), "!=", frozenset([value.strip()])))
            elif "=" in term:
                key, _, value = term.replace("==", "=").partition("=")
                out.append((key.strip(), "=", frozenset([value.strip()])))
            elif term.startswith("!"):
                out.append((term[1:].strip(), "!exists", frozenset()))
            else:
                out.append((term, "exists", frozenset()))
    for key, _, _ in out:
        if not key or " " in key:
            raise ApiStatusError(400, f"unable to parse requirement: invalid label key {key!r}")
    return out


def labels_match(selector: list[tuple[str, str, frozenset[str]]], labels: dict[str, str]) -> bool:
    for key, op, values in selector:
        present = key in labels
        value = labels.get(key)
        ok = {
            "=": present and value in values,
            "in": present and value in values,
            "!=": not present or value not in values,
            "notin": not present or value not in values,
            "exists": present,
            "!exists": not present,
        }[op]
        if not ok:
            return False
    return True


def parse_field_selector(text: str) -> list[tuple[str, bool, str]]:
    """`spec.nodeName=n1,metadata.name!=x` -> [(path, equal, value)]."""
    out = []
    for term in _split_terms(text):
        if "!=" in term:
            path, _, value = term.partition("!=")
            out.append((path.strip(), False, value.strip()))
        elif "=" in term:
            path, _, value = term.replace("==", "=").partition("=")
            out.append((path.strip(), True, value.strip()))
        else:
            raise ApiStatusError(400, f"invalid field selector: {term!r}")
    return out


def _field(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class Filter:
    """Which objects a list or watch sees."""

    namespace: str | None = None
    labels: tuple[tuple[str, str, frozenset[str]], ...] = ()
    fields: tuple[tuple[str, bool, str], ...] = ()

    @classmethod
    def parse(cls, namespace: str | None, label_selector: str, field_selector: str) -> Filter:
        return cls(
            namespace,
            tuple(parse_label_selector(label_selector)),
            tuple(parse_field_selector(field_selector)),
        )

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        if self.labels and not labels_match(list(self.labels), meta.get("labels") or {}):
            return False
        return all((_field(obj, path) == value) == equal for path, equal, value in self.fields)


@dataclass(frozen=True, slots=True)
class Change:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    old: Obj | None
