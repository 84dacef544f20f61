"""CDI spec documents: env as K=V sorted, bind mounts, names within the CDI rules, no empty edits."""

from __future__ import annotations

import pytest

from webhook.core.node import cdi, mps


def test_a_spec_lists_each_device_with_its_env_and_mounts():
    kind = cdi.kind("gpushare.aliyun.com")
    edits = {
        "u1-b": cdi.Edits({"B": "2", "A": "1"}, (mps.Mount("/tmp/nvidia-mps", "/tmp/nvidia-mps"),)),
        "u1-a": cdi.Edits({"X": "y"}),
    }
    assert cdi.spec(kind, edits) == {
        "cdiVersion": cdi.CDI_VERSION,
        "kind": "gpushare.aliyun.com/gpu",
        "devices": [
            {"name": "u1-a", "containerEdits": {"env": ["X=y"]}},
            {
                "name": "u1-b",
                "containerEdits": {
                    "env": ["A=1", "B=2"],
                    "mounts": [
                        {
                            "hostPath": "/tmp/nvidia-mps",
                            "containerPath": "/tmp/nvidia-mps",
                            "options": ["rw", "nosuid", "nodev", "rbind"],
                        }
                    ],
                },
            },
        ],
    }
    assert cdi.device_id(kind, "u1-a") == "gpushare.aliyun.com/gpu=u1-a"
    assert cdi.file_name(kind, "u1") == "gpushare.aliyun.com-gpu_u1.json"


def test_a_device_without_env_is_refused():
    with pytest.raises(cdi.CdiError, match="empty containerEdits"):
        cdi.spec("v.io/gpu", {"x": cdi.Edits({})})


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: cdi.kind("-bad"), "cannot be a CDI vendor"),
        (lambda: cdi.device_name("uid", "a/b"), "is not letters"),
    ],
    ids=["vendor", "device-name"],
)
def test_names_outside_the_cdi_rules_are_refused(call, needle):
    with pytest.raises(cdi.CdiError, match=needle):
        call()
