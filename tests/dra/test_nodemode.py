"""What the driver serves in each node mode: only dra and dra-mps publish, MPS needs Volta."""

from __future__ import annotations

import pytest

from webhook.core.node import devices, mps
from webhook.core.placement import modes
from webhook.dra import nodemode

VOLTA = (devices.Gpu(0, "GPU-a", 16384, "V100", "7.0"),)
PASCAL = (devices.Gpu(0, "GPU-a", 16384, "P100", "6.0"),)


@pytest.mark.parametrize(
    ("labels", "gpus", "force", "expected"),
    [
        ({modes.MODE_LABEL: "dra"}, PASCAL, False, (True, False, "")),
        ({modes.MODE_LABEL: "dra-mps"}, VOLTA, False, (True, True, "")),
        ({modes.MODE_LABEL: "dra"}, VOLTA, True, (True, True, "")),
        ({modes.MODE_LABEL: "dra-mps"}, PASCAL, False, (False, True, "MPS needs Volta")),
        ({modes.MODE_LABEL: "share"}, VOLTA, False, (False, False, "ack.node.gpu.schedule=share: not a DRA")),
        ({}, VOLTA, False, (False, False, "ack.node.gpu.schedule=share (no label): not a DRA mode")),
        ({modes.MODE_LABEL: "Dra"}, VOLTA, False, (False, False, "is not a known mode")),
    ],
    ids=["dra", "dra-mps", "dra-forced-mps", "mps-on-pascal", "share", "unlabelled", "unknown"],
)
def test_only_dra_modes_publish_and_mps_follows_the_mode(labels, gpus, force, expected):
    publish, use_mps, reason = expected
    serving = nodemode.decide(labels, gpus, force)
    assert (serving.serves, serving.mps) == (publish, use_mps)
    assert reason in serving.reason


def test_a_label_change_is_heard_by_the_listeners_and_sets_the_mps_folders():
    heard: list[bool] = []
    dirs = mps.MpsDirs("/run/mps", "/var/log/mps")
    mode = nodemode.NodeMode(VOLTA, force_mps=False, dirs=dirs)
    mode.on_change(lambda: heard.append(mode.serving.serves))
    assert not mode.known.is_set() and mode.mps_dirs() is None
    mode.labels_changed({modes.MODE_LABEL: "dra-mps"})
    assert mode.known.is_set() and mode.mps_dirs() == dirs
    mode.labels_changed({modes.MODE_LABEL: "dra-mps"})  # the same decision: nobody is told
    mode.labels_changed({modes.MODE_LABEL: "default"})
    assert heard == [True, False]
    assert mode.mps_dirs() is None
