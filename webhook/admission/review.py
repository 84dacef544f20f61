"""AdmissionReview v1 (k8s.io/api admission/v1) request dict -> response dict, deciding with
`webhook.core.admission.verdict`.

Pure: no I/O, no clock. `ReviewError` means the request itself is malformed (HTTP 400);
a rule failure is an ordinary denial inside a 200 response.
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

from webhook.core.admission import verdict
from webhook.serving import jsonbody

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
Endpoint = Literal["mutate", "validate"]
# What happened, for logs and metrics: skipped = allowed without looking at the object.
Outcome = Literal["allowed", "patched", "denied", "skipped"]


class ReviewError(ValueError):
    """A request that is not a usable AdmissionReview v1; answered with HTTP 400 and this message."""


class Status(TypedDict):
    status: str
    code: int
    reason: str
    message: str


class Response(TypedDict):
    uid: str
    allowed: bool
    status: NotRequired[Status]
    patch: NotRequired[str]
    patchType: NotRequired[str]
    warnings: NotRequired[list[str]]


class Review(TypedDict):
    apiVersion: str
    kind: str
    response: Response


# Request and Result are NamedTuples, not frozen dataclasses: two are built per review, and a frozen
# dataclass's __init__ (one object.__setattr__ per field) costs ~1 us more for the pair.
class Request(NamedTuple):
    """The fields of `request` we act on, checked for type."""

    uid: str
    kind: str  # request.kind.kind, e.g. "Pod"
    group: str  # request.kind.group, "" for core
    operation: str
    namespace: str
    name: str
    sub_resource: str
    obj: Mapping[str, Any] | None
    old: Mapping[str, Any] | None = None  # oldObject on UPDATE

    @property
    def is_core_pod(self) -> bool:
        return self.kind == "Pod" and self.group == ""


@dataclass(frozen=True, slots=True)
class Policy:
    """What a review decides with: the core rule policy and the namespaces left alone."""

    rules: verdict.Policy
    excluded_namespaces: frozenset[str] = frozenset()


class Result(NamedTuple):
    review: Review
    request: Request
    outcome: Outcome
    violations: int = 0


def parse(body: Any) -> Request:
    """Check the envelope and the request fields we use; ReviewError says what is wrong."""
    if not isinstance(body, dict):
        raise ReviewError(f"body must be a JSON object (an AdmissionReview), got {_type(body)}")
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise ReviewError(
            f"expected apiVersion {API_VERSION!r} and kind {KIND!r}, "
            f"got {_short(body.get('apiVersion'))} and {_short(body.get('kind'))}"
        )
    req = body.get("request")
    if not isinstance(req, dict):
        raise ReviewError(f"request must be an object, got {_type(req)}")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid must be a non-empty string")
    gvk = req.get("kind")
    if not isinstance(gvk, dict) or not isinstance(kind := gvk.get("kind"), str) or not kind:
        raise ReviewError("request.kind must be an object with a non-empty string kind")
    group = gvk.get("group", "")
    if not isinstance(group, str):
        raise ReviewError("request.kind.group must be a string")
    operation = req.get("operation")
    if operation not in OPERATIONS:
        raise ReviewError(
            f"request.operation must be one of {', '.join(OPERATIONS)}, got {_short(operation)}"
        )
    # Absent or null is "", as the API server leaves them out; spelled out, not looped (every review).
    namespace, name = req.get("namespace", ""), req.get("name", "")
    sub_resource = req.get("subResource", "")
    if namespace.__class__ is not str or name.__class__ is not str or sub_resource.__class__ is not str:
        namespace, name, sub_resource = (_text(req, key) for key in ("namespace", "name", "subResource"))
    obj = req.get("object")
    if not isinstance(obj, dict):
        if operation in ("CREATE", "UPDATE"):
            raise ReviewError(f"request.object must be an object for {operation}, got {_type(obj)}")
        obj = None
    old = req.get("oldObject") if operation == "UPDATE" else None
    return Request(
        uid,
        kind,
        group,
        operation,
        namespace,
        name,
        sub_resource,
        obj,
        old if isinstance(old, dict) else None,
    )


def _text(req: dict[str, Any], key: str) -> str:
    """A string field of the request: "" when absent or null; ReviewError for any other type."""
    value = req.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ReviewError(f"request.{key} must be a string, got {_type(value)}")
    return value


def review(body: Any, endpoint: Endpoint, policy: Policy) -> Result:
    """Answer one AdmissionReview for /mutate or /validate (the response envelope, uid echoed)."""
    req = parse(body)
    if not _examined(req, endpoint, policy):
        return Result(envelope({"uid": req.uid, "allowed": True}), req, "skipped")
    assert req.obj is not None  # _examined is false without an object
    found = verdict.evaluate(req.obj, policy.rules)
    if req.old is not None and not found.allowed:
        # Denied only for what this UPDATE breaks (ratcheting), never for what the object already had.
        found = verdict.ratchet(found, verdict.evaluate(req.old, policy.rules))
    response: Response = {"uid": req.uid, "allowed": found.allowed}
    if found.warnings:  # already as the API server keeps them, and capped (verdict.MAX_WARNINGS)
        response["warnings"] = list(found.warnings)
    if not found.allowed:
        response["status"] = {
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": found.message(),
        }
        return Result(envelope(response), req, "denied", len(found.violations))
    if endpoint == "mutate":
        ops = verdict.mutation_patch(req.obj, found, policy.rules)
        if ops:
            raw = jsonbody.encode(ops)
            response["patch"] = binascii.b2a_base64(raw, newline=False).decode("ascii")  # base64.b64encode
            response["patchType"] = "JSONPatch"
            return Result(envelope(response), req, "patched")
    return Result(envelope(response), req, "allowed")


def _examined(req: Request, endpoint: Endpoint, policy: Policy) -> bool:
    """Whether the rules look at this request at all; everything else is allowed untouched."""
    if req.obj is None or req.sub_resource or req.namespace in policy.excluded_namespaces:
        return False
    if endpoint == "mutate":
        # Only new Pods are mutated; workloads never are (no drift for GitOps tools).
        return req.operation == "CREATE" and req.is_core_pod
    if req.operation not in ("CREATE", "UPDATE"):
        return False
    # An object being deleted may still need updates (finalizers removed); never block those.
    metadata = req.obj.get("metadata")
    return not (
        req.operation == "UPDATE" and isinstance(metadata, dict) and metadata.get("deletionTimestamp")
    )


def error_body(message: str) -> dict[str, Any]:
    """The JSON body of a 4xx/5xx answer (not an AdmissionReview: the API server treats it as a failure)."""
    return {"error": message}


def envelope(response: Response) -> Review:
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
