"""The GPU type labels of a node: ACK's keys and the generic set, valid label values, removal."""

from __future__ import annotations

import re

import pytest

from webhook.core.node import gpulabels
from webhook.core.node.devices import Gpu

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def test_one_model_node_gets_acks_labels_and_the_generic_set():
    gpus = [Gpu(i, f"GPU-{i}", 16160, "Tesla V100-SXM2-16GB", "7.0") for i in range(2)]
    assert gpulabels.node_labels(gpus) == {
        "aliyun.accelerator/nvidia_name": "Tesla-V100-SXM2-16GB",
        "aliyun.accelerator/nvidia_mem": "16160MiB",
        "aliyun.accelerator/nvidia_count": "2",
        "accelerator": "nvidia-tesla-v100-sxm2-16gb",
        "gpushare.aliyun.com/compute-capability": "7.0",
    }


def test_mixed_models_are_named_mixed_with_the_smallest_memory_and_capability():
    gpus = [Gpu(0, "GPU-a", 15360, "Tesla T4", "7.5"), Gpu(1, "GPU-b", 40960, "A100-PCIE-40GB", "8.0")]
    labels = gpulabels.node_labels(gpus)
    assert labels[gpulabels.NVIDIA_NAME] == "mixed"
    assert labels[gpulabels.NVIDIA_MEM] == "15360MiB"
    assert labels[gpulabels.COMPUTE_CAPABILITY] == "7.5"


def test_no_gpus_removes_every_key():
    assert gpulabels.node_labels([]) == dict.fromkeys(gpulabels.KEYS)


def test_unknown_model_and_capability_remove_those_keys_only():
    labels = gpulabels.node_labels([Gpu(0, "GPU-a", 8192, "", "")])
    assert labels[gpulabels.NVIDIA_NAME] is None
    assert labels[gpulabels.ACCELERATOR] is None
    assert labels[gpulabels.COMPUTE_CAPABILITY] is None
    assert labels[gpulabels.NVIDIA_COUNT] == "1"


@pytest.mark.parametrize(
    ("model", "name", "accelerator"),
    [
        (
            "NVIDIA GeForce RTX 3090 (rev a1)",
            "NVIDIA-GeForce-RTX-3090-rev-a1",
            "nvidia-nvidia-geforce-rtx-3090-rev-a1",
        ),
        ("  -weird/name!  ", "weird-name", "nvidia-weird-name"),
        ("x" * 100, "x" * 63, "nvidia-" + "x" * 56),
        ("Ünïcode GPU", "n-code-GPU", "nvidia-n-code-gpu"),
        ("___", None, None),  # nothing usable left: the keys are removed
    ],
    ids=["spaces-parens", "edges", "long", "non-ascii", "only-separators"],
)
def test_every_model_becomes_a_valid_label_value(model, name, accelerator):
    labels = gpulabels.node_labels([Gpu(0, "GPU-a", 8192, model, "8.6")])
    assert (labels[gpulabels.NVIDIA_NAME], labels[gpulabels.ACCELERATOR]) == (name, accelerator)
    for key in (gpulabels.NVIDIA_NAME, gpulabels.ACCELERATOR):
        value = labels[key]
        assert value is None or (len(value) <= 63 and LABEL_VALUE.match(value)), (key, value)


@pytest.mark.parametrize(("text", "expected"), [("7.0", (7, 0)), ("12.1", (12, 1)), ("7", None), ("", None)])
def test_compute_capability_parses_major_dot_minor_only(text, expected):
    assert gpulabels.compute_capability(text) == expected
