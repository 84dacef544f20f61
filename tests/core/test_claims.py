"""The rules for ResourceClaims and ResourceClaimTemplates of our DeviceClasses
(webhook/core/admission/claims.py), through `verdict.evaluate` as the webhook and `gpushare check` call
them."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.admission import claims, verdict

SHARE, WHOLE = "gpushare-memory", "gpushare-gpu"
MEMORY = "spec.spec.devices.requests[0].exactly.capacity.requests.memory"


def exact(cls: str = SHARE, memory: object = None, **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": cls, **extra}
    if memory is not None:
        request["capacity"] = {"requests": {"memory": memory}}
    return request


def template(*requests: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    wrapped = [{"name": f"r{i}", "exactly": r} for i, r in enumerate(requests)]
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": {"requests": wrapped}}},
    }


def claim(requests: list[Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": requests}},
    }


# (description, request, [(path, value, words in the problem, words in the fix)])
DENIED = [
    (
        "a count of GiB written as for gpu-mem is 3 bytes",
        exact(memory="3"),
        [(MEMORY, "3", "is read as 3 bytes", "write 3Gi")],
    ),
    ("a plain number in JSON", exact(memory=8), [(MEMORY, "8", "is read as 8 bytes", "write 8Gi")]),
    (
        "a fraction of a byte",
        exact(memory="1.5"),
        [(MEMORY, "1.5", "is read as 1.5 bytes", "e.g. 4Gi")],
    ),
    (
        "bytes, but too many GiB to be meant as such",
        exact(memory="100"),
        [(MEMORY, "100", "is read as 100 bytes", "e.g. 4Gi")],
    ),
    (
        "no quantity",
        exact(memory="four"),
        [(MEMORY, "four", "is not a valid quantity", "e.g. 4Gi")],
    ),
    ("a list", exact(memory=[]), [(MEMORY, "<a list>", "is not a valid quantity", "e.g. 4Gi")]),
    ("zero", exact(memory="0"), [(MEMORY, "0", "must be more than 0", "e.g. 4Gi")]),
    ("negative", exact(memory="-2Gi"), [(MEMORY, "-2Gi", "must be more than 0", "e.g. 4Gi")]),
    (
        "more than the largest GPU",
        exact(memory="81Gi"),
        [(MEMORY, "81Gi", "more than the largest GPU has (80Gi)", "ask at most 80Gi")],
    ),
    (
        "a count where a share is meant",
        exact(count=3),
        [
            (
                "spec.spec.devices.requests[0].exactly.count",
                "3",
                "asks for 3 whole GPUs (no memory is asked), not 3 GiB of one",
                "capacity: {requests: {memory: 3Gi}}",
            )
        ],
    ),
    (
        "a count beside memory",
        exact(memory="4Gi", count=2),
        [("spec.spec.devices.requests[0].exactly.count", "2", "asks for 2 GPUs", "one request per GPU")],
    ),
    (
        "allocationMode All on the share class",
        exact(memory="4Gi", allocationMode="All"),
        [
            (
                "spec.spec.devices.requests[0].exactly.allocationMode",
                "All",
                "a share of every GPU",
                f"use {WHOLE}",
            )
        ],
    ),
    (
        "memory on the whole-GPU class",
        exact(WHOLE, memory="4Gi"),
        [(MEMORY, "4Gi", f"class {WHOLE} holds whole GPUs", f"deviceClassName: {SHARE}")],
    ),
    (
        "a capacity our GPUs do not publish",
        {"deviceClassName": SHARE, "capacity": {"requests": {"memory": "4Gi", "cores": "50"}}},
        [
            (
                "spec.spec.devices.requests[0].exactly.capacity.requests.cores",
                None,
                "publish no capacity cores",
                "remove it",
            )
        ],
    ),
    (
        "capacity of the wrong type",
        {"deviceClassName": SHARE, "capacity": "4Gi"},
        [("spec.spec.devices.requests[0].exactly.capacity", "4Gi", "expected an object", "an object")],
    ),
]


@pytest.mark.parametrize(
    ("request_body", "expected"), [(r, e) for _, r, e in DENIED], ids=[d for d, _, _ in DENIED]
)
def test_denied_requests_name_the_field_the_problem_and_the_fix(
    request_body: dict[str, Any], expected: list[tuple[str, str | None, str, str]]
) -> None:
    found = verdict.evaluate(template(request_body), verdict.Policy())
    assert not found.allowed
    got = [(v.path, v.value, v.problem, v.fix) for v in found.violations]
    assert len(got) == len(expected), got
    for (path, value, problem, fix), (want_path, want_value, words, fix_words) in zip(
        got, expected, strict=True
    ):
        assert (path, value) == (want_path, want_value)
        assert words in problem
        assert fix_words in fix
    assert found.message().startswith("ResourceClaimTemplate has 1 problem with GPU resources:\n")


# (description, request, warning or None)
ALLOWED = [
    ("a share in whole GiB", exact(memory="3Gi"), None),
    ("the largest GPU", exact(memory="80Gi"), None),
    ("bytes that are whole GiB", exact(memory="3221225472"), None),
    (
        "rounded up to the step",
        exact(memory="2500Mi"),
        "request r0: memory 2500Mi is rounded up to 3Gi (steps of 1Gi); ask 3Gi",
    ),
    (
        "the share class without memory holds a whole GPU",
        exact(),
        f"request r0: {SHARE} without capacity.requests.memory holds a whole GPU; for that, use {WHOLE}",
    ),
    ("whole GPUs by count", exact(WHOLE, count=4), None),
    ("every GPU whole", exact(WHOLE, allocationMode="All"), None),
    ("count 1 is a share", exact(memory="2Gi", count=1), None),
    ("another vendor's class is not ours", exact("gpu.nvidia.com", memory="3", count=8), None),
]


@pytest.mark.parametrize(
    ("request_body", "warning"), [(r, w) for _, r, w in ALLOWED], ids=[d for d, _, _ in ALLOWED]
)
def test_allowed_requests_and_their_warnings(request_body: dict[str, Any], warning: str | None) -> None:
    found = verdict.evaluate(template(request_body), verdict.Policy())
    assert found.allowed, found.message()
    assert found.warnings == (() if warning is None else (warning,))


def test_a_claim_checks_exact_requests_and_first_available_subrequests() -> None:
    obj = claim(
        [
            {"name": "a", "exactly": exact(memory="2Gi")},
            {
                "name": "b",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": SHARE, "capacity": {"requests": {"memory": "8"}}},
                    {
                        "name": "small",
                        "deviceClassName": SHARE,
                        "capacity": {"requests": {"memory": "1536Mi"}},
                    },
                ],
            },
        ]
    )
    found = verdict.evaluate(obj, verdict.Policy())
    assert [v.path for v in found.violations] == [
        "spec.devices.requests[1].firstAvailable[0].capacity.requests.memory"
    ]
    assert found.warnings == ("request b/small: memory 1536Mi is rounded up to 2Gi (steps of 1Gi); ask 2Gi",)
    assert found.message().startswith("ResourceClaim has 1 problem")


def test_v1beta1_requests_hold_the_class_themselves() -> None:
    obj = template(version="v1beta1")
    obj["spec"]["spec"]["devices"]["requests"] = [{"name": "gpu", **exact(memory="3")}]
    found = verdict.evaluate(obj, verdict.Policy())
    assert [v.path for v in found.violations] == ["spec.spec.devices.requests[0].capacity.requests.memory"]


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ({"spec": "x"}, "spec"),
        ({"spec": {"spec": {"devices": []}}}, "spec.spec.devices"),
        ({"spec": {"spec": {"devices": {"requests": {"a": 1}}}}}, "spec.spec.devices.requests"),
    ],
)
def test_wrong_types_on_the_way_are_violations_not_errors(obj: dict[str, Any], path: str) -> None:
    found = verdict.evaluate(
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", **obj}, verdict.Policy()
    )
    assert [v.path for v in found.violations] == [path]
    assert "has the wrong type" in found.violations[0].problem


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate"},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "spec": {}},
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "spec": {"devices": {"requests": [3, None]}},
        },
        {"apiVersion": "example.com/v1", "kind": "ResourceClaim", "spec": {"devices": {"requests": "x"}}},
    ],
)
def test_claims_without_our_requests_are_allowed(obj: dict[str, Any]) -> None:
    assert verdict.evaluate(obj, verdict.Policy()).allowed


def test_the_policy_names_the_classes_the_step_and_the_largest_gpu() -> None:
    policy = verdict.Policy(
        claims=claims.ClaimPolicy(
            share_class="mem", whole_class="card", step=256 * claims.MIB, max_memory=141 * claims.GIB
        )
    )
    assert verdict.evaluate(template(exact(SHARE, memory="3")), policy).allowed  # not ours any more
    found = verdict.evaluate(template(exact("mem", memory="100Gi"), exact("mem", memory="1000Mi")), policy)
    assert found.allowed
    assert found.warnings == ("request r1: memory 1000Mi is rounded up to 1Gi (steps of 256Mi); ask 1Gi",)
    found = verdict.evaluate(template(exact("mem", memory="142Gi")), policy)
    assert "more than the largest GPU has (141Gi)" in found.violations[0].problem


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"step": 0}, "memory step must be a whole number of MiB"),
        ({"step": 1000}, "memory step must be a whole number of MiB"),
        ({"max_memory": claims.MIB + 1}, "largest GPU memory must be a whole number of MiB"),
        ({"max_memory": claims.MIB}, "less than one step"),
    ],
)
def test_a_policy_that_cannot_be_used_is_refused(values: dict[str, Any], words: str) -> None:
    with pytest.raises(claims.PolicyError, match=words):
        claims.ClaimPolicy(**values)
