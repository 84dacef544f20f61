"""A gpu-mem share or DRA claim too small to hold a CUDA context is admitted with a warning that says what
to ask instead (verdict.Policy.min_share_mib; the webhook and `gpushare check` alike)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from webhook.core.admission import claims, verdict

MEM = "aliyun.com/gpu-mem"


def _container(name: str, memory: str | None) -> dict[str, Any]:
    limits = {MEM: memory} if memory is not None else {}
    return {"name": name, "image": "x", "resources": {"limits": limits}}


def _pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


@pytest.mark.parametrize(
    ("unit", "asked", "warning"),
    [
        (
            "MiB",
            "256",
            'container "train": 256 MiB of GPU memory may not hold a CUDA context; ask at least 512',
        ),
        (
            "MiB",
            "511",
            'container "train": 511 MiB of GPU memory may not hold a CUDA context; ask at least 512',
        ),
        ("MiB", "512", None),
        ("MiB", "4k", None),  # how the API server writes 4000: 4000 MiB
        ("MiB", "0", None),  # no share asked
        (
            "128MiB",
            "2",
            'container "train": 256 MiB of GPU memory may not hold a CUDA context; ask at least 4 (512 MiB)',
        ),
        ("128MiB", "4", None),
        ("GiB", "1", None),  # the smallest share in GiB is above the least
    ],
)
def test_a_share_under_the_least_is_allowed_with_a_warning_in_the_users_unit(
    unit: str, asked: str, warning: str | None
) -> None:
    found = verdict.evaluate(_pod(_container("train", asked)), verdict.Policy(memory_unit=unit))
    assert found.allowed
    assert found.warnings == ((warning,) if warning else ())


def test_a_denied_value_gets_its_fix_and_no_second_word_on_its_size() -> None:
    found = verdict.evaluate(_pod(_container("train", "0.5")), verdict.Policy(memory_unit="MiB"))
    assert not found.allowed
    assert found.warnings == ()
    assert found.message().endswith("fix: write 1; the unit is MiB")


def test_every_small_container_is_named_init_containers_too_and_workloads_say_which_template() -> None:
    pod = _pod(_container("a", "128"), _container("b", "2048"), init=(_container("setup", "64"),))
    found = verdict.evaluate(pod, verdict.Policy(memory_unit="MiB"))
    assert [w.split(":")[0] for w in found.warnings] == ['container "a"', 'container "setup"']
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": pod["spec"]}}}
    found = verdict.evaluate(deployment, verdict.Policy(memory_unit="MiB"))
    assert found.warnings[0].startswith('spec.template: container "a": 128 MiB')


def test_the_least_share_is_configurable_and_zero_turns_the_warning_off() -> None:
    pod = _pod(_container("train", "768"))
    assert verdict.evaluate(pod, verdict.Policy(memory_unit="MiB")).warnings == ()
    raised = verdict.evaluate(pod, verdict.Policy(memory_unit="MiB", min_share_mib=1024))
    assert raised.warnings == (
        'container "train": 768 MiB of GPU memory may not hold a CUDA context; ask at least 1024',
    )
    small = _pod(_container("train", "1"))
    assert verdict.evaluate(small, verdict.Policy(memory_unit="MiB", min_share_mib=0)).warnings == ()
    with pytest.raises(ValueError, match="the least share must be 0 MiB"):
        verdict.Policy(min_share_mib=-1)


def _claim(memory: str) -> dict[str, Any]:
    exactly = {"deviceClassName": "gpushare-memory", "capacity": {"requests": {"memory": memory}}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def test_a_claim_is_judged_by_the_memory_the_driver_grants_it() -> None:
    mib_steps = verdict.Policy(memory_unit="MiB", claims=claims.ClaimPolicy(step=128 << 20))
    assert verdict.evaluate(_claim("200Mi"), mib_steps).warnings == (
        "request gpu: memory 200Mi is rounded up to 256Mi (steps of 128Mi); ask 256Mi",
        "request gpu: 256 MiB of GPU memory may not hold a CUDA context; ask at least 512Mi",
    )
    assert verdict.evaluate(_claim("512Mi"), mib_steps).warnings == ()
    assert verdict.evaluate(_claim("450Mi"), mib_steps).warnings[0].endswith("ask 512Mi")  # rounded: enough
    assert len(verdict.evaluate(_claim("450Mi"), mib_steps).warnings) == 1
    # Steps of 1Gi (the default) never grant less than the least share.
    assert verdict.evaluate(_claim("100Mi"), verdict.Policy()).warnings == (
        "request gpu: memory 100Mi is rounded up to 1Gi (steps of 1Gi); ask 1Gi",
    )
    assert verdict.evaluate(_claim("200Mi"), replace(mib_steps, min_share_mib=0)).warnings == (
        "request gpu: memory 200Mi is rounded up to 256Mi (steps of 128Mi); ask 256Mi",
    )
