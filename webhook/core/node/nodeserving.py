"""Whether a node-local component serves its node's GPUs in the node's mode (`ack.node.gpu.schedule`,
core/placement/modes.py), and with MPS or not. One rule for the device plugin and the DRA driver; a
`Component` holds what differs between them: the modes each serves, its MPS mode and the words of its reasons.

    decide(DEVICE_PLUGIN, {"ack.node.gpu.schedule": "mps"}, volta_gpus, force_mps=False)
    -> Serving("mps", serves=True, mps=True)
    decide(DRA_DRIVER, {}, volta_gpus, force_mps=False)
    -> Serving("share", serves=False, reason="node label ack.node.gpu.schedule=share (no label): not a DRA
       mode (dra, dra-mps); publishing no devices")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.core.node import devices, mps
from webhook.core.placement import modes
from webhook.core.placement.modes import Mode


@dataclass(frozen=True, slots=True)
class Component:
    """One component's part in the rule. `elsewhere` names, for each mode it does not serve, who does."""

    served_modes: frozenset[Mode]
    mps_mode: Mode
    elsewhere: Mapping[Mode, str]
    nothing: str  # ends every reason for serving nothing
    nothing_for_mps: str  # ends the reason when MPS is refused


@dataclass(frozen=True, slots=True)
class Serving:
    """The decision for one set of labels: serve or not (and why not), MPS or not."""

    mode: str
    serves: bool
    mps: bool = False
    reason: str = ""


DEVICE_PLUGIN = Component(
    served_modes=frozenset(m for m in Mode if m.shares),
    mps_mode=Mode.MPS,
    elsewhere={
        m: "our DRA driver serves the GPUs here" if m.dra else "NVIDIA's plugin serves whole GPUs here"
        for m in Mode
        if not m.shares
    },
    nothing="advertising nothing",
    nothing_for_mps="advertising nothing in mps mode",
)

DRA_DRIVER = Component(
    served_modes=frozenset(m for m in Mode if m.dra),
    mps_mode=Mode.DRA_MPS,
    elsewhere={m: "not a DRA mode (dra, dra-mps)" for m in Mode if not m.dra},
    nothing="publishing no devices",
    nothing_for_mps="publishing no devices",
)


def decide(
    component: Component, labels: Mapping[str, object], gpus: Sequence[devices.Gpu], force_mps: bool
) -> Serving:
    try:
        mode = modes.node_mode(labels)
    except modes.ModeError as err:
        return Serving(str(labels.get(modes.MODE_LABEL)), False, reason=f"{err}; {component.nothing}")
    if mode not in component.served_modes:
        label = mode.value if modes.MODE_LABEL in labels else f"{mode.value} (no label)"
        reason = f"node label {modes.MODE_LABEL}={label}: {component.elsewhere[mode]}; {component.nothing}"
        return Serving(mode.value, False, reason=reason)
    use_mps = mode is component.mps_mode or force_mps
    refused = mps.refusal(gpus) if use_mps else None
    if refused is not None:
        return Serving(mode.value, False, mps=True, reason=f"{refused}; {component.nothing_for_mps}")
    return Serving(mode.value, True, mps=use_mps)
