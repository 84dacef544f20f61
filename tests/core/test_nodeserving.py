"""The one rule for what the device plugin and the DRA driver serve in each node mode, and their words."""

from __future__ import annotations

import pytest

from webhook.core.node import devices, nodeserving
from webhook.core.node.nodeserving import DEVICE_PLUGIN, DRA_DRIVER, Serving
from webhook.core.placement import modes

VOLTA = (devices.Gpu(0, "GPU-a", 16384, "V100", "7.0"),)
PASCAL = (devices.Gpu(0, "GPU-a", 16384, "P100", "6.0"),)
OLD = (
    "MPS needs Volta (compute capability 7.0) or newer: GPU 0 (P100) has compute capability 6.0; "
    "use mode share or cgpu on this node"
)
KNOWN = ", ".join(m.value for m in modes.Mode)


def label(value: str) -> dict[str, object]:
    return {modes.MODE_LABEL: value}


@pytest.mark.parametrize(
    ("component", "labels", "gpus", "force", "expected"),
    [
        (DEVICE_PLUGIN, label("share"), PASCAL, False, Serving("share", True)),
        (DEVICE_PLUGIN, {}, PASCAL, False, Serving("share", True)),
        (DEVICE_PLUGIN, label("cgpu"), PASCAL, False, Serving("cgpu", True)),
        (DEVICE_PLUGIN, label("mps"), VOLTA, False, Serving("mps", True, mps=True)),
        (DEVICE_PLUGIN, label("cgpu"), VOLTA, True, Serving("cgpu", True, mps=True)),
        (DRA_DRIVER, label("dra"), PASCAL, False, Serving("dra", True)),
        (DRA_DRIVER, label("dra-mps"), VOLTA, False, Serving("dra-mps", True, mps=True)),
        (DRA_DRIVER, label("dra"), VOLTA, True, Serving("dra", True, mps=True)),
    ],
    ids=[
        "plugin-share",
        "plugin-unlabelled",
        "plugin-cgpu",
        "plugin-mps",
        "plugin-forced-mps",
        "dra-dra",
        "dra-dra-mps",
        "dra-forced-mps",
    ],
)
def test_a_served_mode_serves_with_mps_if_the_mode_or_flag_asks(component, labels, gpus, force, expected):
    assert nodeserving.decide(component, labels, gpus, force) == expected


@pytest.mark.parametrize(
    ("component", "labels", "force", "ending"),
    [
        (DEVICE_PLUGIN, label("mps"), False, "advertising nothing in mps mode"),
        (DEVICE_PLUGIN, label("share"), True, "advertising nothing in mps mode"),
        (DRA_DRIVER, label("dra-mps"), False, "publishing no devices"),
        (DRA_DRIVER, label("dra"), True, "publishing no devices"),
    ],
    ids=["plugin-mps", "plugin-forced", "dra-dra-mps", "dra-forced"],
)
def test_mps_on_gpus_older_than_volta_serves_nothing_and_says_why(component, labels, force, ending):
    expected = Serving(str(labels[modes.MODE_LABEL]), False, mps=True, reason=f"{OLD}; {ending}")
    assert nodeserving.decide(component, labels, PASCAL, force) == expected


@pytest.mark.parametrize(
    ("component", "labels", "expected"),
    [
        (
            DEVICE_PLUGIN,
            label("default"),
            "node label ack.node.gpu.schedule=default: NVIDIA's plugin serves whole GPUs here; advertising "
            "nothing",
        ),
        (
            DEVICE_PLUGIN,
            label("topology"),
            "node label ack.node.gpu.schedule=topology: NVIDIA's plugin serves whole GPUs here; advertising "
            "nothing",
        ),
        (
            DEVICE_PLUGIN,
            label("dra-mps"),
            "node label ack.node.gpu.schedule=dra-mps: our DRA driver serves the GPUs here; advertising "
            "nothing",
        ),
        (
            DRA_DRIVER,
            label("share"),
            "node label ack.node.gpu.schedule=share: not a DRA mode (dra, dra-mps); publishing no devices",
        ),
        (
            DRA_DRIVER,
            {},
            "node label ack.node.gpu.schedule=share (no label): not a DRA mode (dra, dra-mps); publishing no "
            "devices",
        ),
    ],
    ids=["plugin-default", "plugin-topology", "plugin-dra-mps", "dra-share", "dra-unlabelled"],
)
def test_a_mode_the_component_does_not_serve_names_who_does(component, labels, expected):
    # MPS is never looked at: forced MPS on old GPUs still gets the mode's reason.
    serving = nodeserving.decide(component, labels, PASCAL, force_mps=True)
    assert serving == Serving(serving.mode, False, reason=expected)


@pytest.mark.parametrize(
    ("component", "ending"),
    [(DEVICE_PLUGIN, "advertising nothing"), (DRA_DRIVER, "publishing no devices")],
    ids=["plugin", "dra"],
)
@pytest.mark.parametrize("raw", ["Dra", "shared", 7])
def test_an_unreadable_label_serves_nothing_and_names_the_known_modes(component, ending, raw):
    serving = nodeserving.decide(component, {modes.MODE_LABEL: raw}, VOLTA, force_mps=False)
    reason = f"node label ack.node.gpu.schedule={raw!r} is not a known mode; use one of {KNOWN}; {ending}"
    assert serving == Serving(str(raw), False, reason=reason)


@pytest.mark.parametrize("component", [DEVICE_PLUGIN, DRA_DRIVER], ids=["plugin", "dra"])
def test_every_mode_is_served_or_names_who_serves_it(component):
    assert component.mps_mode in component.served_modes
    assert component.served_modes.isdisjoint(component.elsewhere)
    assert component.served_modes | set(component.elsewhere) == set(modes.Mode)


def test_no_mode_is_served_by_both():
    assert DEVICE_PLUGIN.served_modes.isdisjoint(DRA_DRIVER.served_modes)
