"""How GPUs reach containers, as the chart renders it for both node agents (docs/cdi.md): the three flags,
the node's CDI spec folders mounted read-only, the NRI plugin's management-device annotation, no
RuntimeClass unless the cluster has `nvidia` (`helm template` has no cluster) or one is named, and the
schema refusing what the agents would refuse."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import render

AGENTS = (("-device-plugin", "device-plugin"), ("-dra-driver", "dra-driver"))


def _pod(objects: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    template: dict[str, Any] = render.find(objects, "DaemonSet", suffix)["spec"]["template"]
    return template


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render.render({"dra": {"enabled": True}})


@pytest.mark.parametrize(("suffix", "container"), AGENTS)
def test_both_agents_get_the_flags_and_the_spec_folders_read_only(
    objects: list[dict[str, Any]], suffix: str, container: str
) -> None:
    pod = _pod(objects, suffix)
    (found,) = (c for c in pod["spec"]["containers"] if c["name"] == container)
    args = found["args"]
    assert "--device-list-strategy=auto" in args
    assert "--cdi-spec-dirs=/etc/cdi,/var/run/cdi" in args
    assert "--cdi-kind=nvidia.com/gpu" in args
    mounts = {m["mountPath"]: m for m in found["volumeMounts"]}
    assert mounts["/etc/cdi"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes[mounts["/etc/cdi"]["name"]]["hostPath"] == {
        "path": "/etc/cdi",
        "type": "DirectoryOrCreate",
    }
    if container == "device-plugin":
        assert mounts["/var/run/cdi"]["readOnly"] is True
    else:  # the driver writes its own specs there: mounted once, read-write
        assert "readOnly" not in mounts["/var/run/cdi"]
        assert [m["mountPath"] for m in found["volumeMounts"]].count("/var/run/cdi") == 1


@pytest.mark.parametrize(("suffix", "container"), AGENTS)
def test_both_agents_ask_the_nri_plugin_for_the_management_device_and_name_no_runtime_class(
    objects: list[dict[str, Any]], suffix: str, container: str
) -> None:
    pod = _pod(objects, suffix)
    notes = pod["metadata"]["annotations"]
    assert notes == {f"nvidia.cdi.k8s.io/container.{container}": "management.nvidia.com/gpu=all"}
    assert "runtimeClassName" not in pod["spec"]  # auto, and `helm template` sees no RuntimeClass nvidia


def test_the_management_device_can_be_turned_off_and_pod_annotations_still_apply() -> None:
    objects = render.render(
        {"cdi": {"managementDevice": ""}, "devicePlugin": {"podAnnotations": {"team": "gpu"}}}
    )
    assert _pod(objects, "-device-plugin")["metadata"]["annotations"] == {"team": "gpu"}


def test_a_named_runtime_class_and_other_folders_are_rendered_as_given() -> None:
    objects = render.render(
        {
            "cdi": {
                "deviceListStrategy": "cdi-cri",
                "specDirs": ["/run/cdi"],
                "kind": "k8s.device-plugin.nvidia.com/gpu",
            },
            "devicePlugin": {"runtimeClassName": "nvidia-cdi"},
        }
    )
    pod = _pod(objects, "-device-plugin")
    assert pod["spec"]["runtimeClassName"] == "nvidia-cdi"
    args = pod["spec"]["containers"][0]["args"]
    assert {"--device-list-strategy=cdi-cri", "--cdi-spec-dirs=/run/cdi"} <= set(args)
    assert "--cdi-kind=k8s.device-plugin.nvidia.com/gpu" in args
    assert [m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"] if "cdi" in m["name"]] == [
        "/run/cdi"
    ]
    assert (
        "runtimeClassName"
        not in _pod(render.render({"devicePlugin": {"runtimeClassName": ""}}), "-device-plugin")["spec"]
    )


@pytest.mark.parametrize(
    "values",
    [
        {"cdi": {"deviceListStrategy": "cdi"}},
        {"cdi": {"specDirs": ["etc/cdi"]}},
        {"cdi": {"specDirs": []}},
        {"cdi": {"kind": "nvidia.com"}},
    ],
    ids=["strategy", "relative-dir", "no-dir", "kind"],
)
def test_the_schema_refuses_what_the_agents_would_refuse(values: dict[str, Any]) -> None:
    assert "cdi" in render.render_error(values)


def test_the_device_plugin_may_publish_how_its_node_hands_gpus_out() -> None:
    policy = render.find(render.render(), "ValidatingAdmissionPolicy", "-device-plugin")
    notes = next(v for v in policy["spec"]["variables"] if v["name"] == "nodeNotes")
    assert "'gpushare.aliyun.com/device-list'" in notes["expression"]
