"""The ValidatingWebhookConfiguration sends ResourceClaims and ResourceClaimTemplates naming our DeviceClasses
to /validate on CREATE, and no other claim (matchConditions evaluated by tests/chart/cel.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import cel, render

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)

HOOKS = {
    "resourceclaims": lambda spec: {"kind": "ResourceClaim", "spec": spec},
    "resourceclaimtemplates": lambda spec: {"kind": "ResourceClaimTemplate", "spec": {"spec": spec}},
}


def _requests(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


SPECS: dict[str, tuple[dict[str, Any], bool]] = {
    "share": (_requests({"name": "a", "exactly": {"deviceClassName": "gpushare-memory"}}), True),
    "whole": (_requests({"name": "a", "exactly": {"deviceClassName": "gpushare-gpu", "count": 2}}), True),
    "first-available": (
        _requests(
            {
                "name": "a",
                "firstAvailable": [
                    {"name": "x", "deviceClassName": "other"},
                    {"name": "y", "deviceClassName": "gpushare-memory"},
                ],
            }
        ),
        True,
    ),
    "second-request": (
        _requests(
            {"name": "a", "exactly": {"deviceClassName": "other"}},
            {"name": "b", "exactly": {"deviceClassName": "gpushare-memory"}},
        ),
        True,
    ),
    "another-class": (_requests({"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com"}}), False),
    "no-requests": ({"devices": {}}, False),
    "no-devices": ({}, False),
}


def _hooks(values: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    out = {}
    for obj in render.render(values):
        if obj["kind"] == "ValidatingWebhookConfiguration":
            for hook in obj["webhooks"]:
                name = hook["name"].removesuffix(".validate.gpushare.aliyun.com")
                if name in HOOKS:
                    out[name] = hook
    return out


@pytest.fixture(scope="module")
def hooks() -> dict[str, dict[str, Any]]:
    return _hooks()


def test_claims_go_to_validate_on_create_in_resource_k8s_io_v1(hooks: dict[str, dict[str, Any]]) -> None:
    assert set(hooks) == set(HOOKS)
    for name, hook in hooks.items():
        assert hook["clientConfig"]["service"]["path"] == "/validate"
        # Claim specs are immutable: an UPDATE cannot bring a new problem.
        assert hook["rules"] == [
            {
                "operations": ["CREATE"],
                "apiGroups": ["resource.k8s.io"],
                "apiVersions": ["v1"],
                "resources": [name],
                "scope": "Namespaced",
            }
        ]
        assert hook["matchPolicy"] == "Equivalent"  # v1beta1/v1beta2 claims arrive converted to v1


@pytest.mark.parametrize("hook", list(HOOKS))
@pytest.mark.parametrize("case", list(SPECS))
def test_condition_accepts_claims_of_our_classes_and_skips_others(
    hooks: dict[str, dict[str, Any]], hook: str, case: str
) -> None:
    spec, expected = SPECS[case]
    (condition,) = hooks[hook]["matchConditions"]
    assert cel.evaluate(condition["expression"], {"object": HOOKS[hook](spec)}) is expected


def test_the_class_names_and_step_come_from_the_dra_values() -> None:
    values = {
        "dra": {
            "deviceClasses": {"share": "mem", "wholeGpu": "card"},
            "mibStep": 256,
            "maxClaimMemory": "141Gi",
        },
        "gpuMemory": {"unit": "MiB"},
    }
    hooks = _hooks(values)
    (condition,) = hooks["resourceclaims"]["matchConditions"]
    spec = _requests({"name": "a", "exactly": {"deviceClassName": "card"}})
    assert cel.evaluate(condition["expression"], {"object": {"spec": spec}}) is True
    assert cel.evaluate(condition["expression"], {"object": {"spec": SPECS["share"][0]}}) is False
    (config,) = [
        o
        for o in render.render(values)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-webhook")
    ]
    assert (
        "dra:\n  maxMemory: 141Gi\n  memoryStep: 256Mi\n  shareClass: mem\n  wholeGpuClass: card\n"
        in config["data"]["config.yaml"]
    )
