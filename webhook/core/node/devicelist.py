"""How a node hands its GPUs to containers: NVIDIA_VISIBLE_DEVICES for the NVIDIA runtime in its legacy
mode, CDI device names that containerd and CRI-O inject themselves (GPU Operator 25.10+, the toolkit's CDI
spec), or both. NVIDIA's device plugin calls this its `deviceListStrategy`; ours takes the same names and
`auto`, which uses CDI as soon as the node's spec names one of its GPUs.

    decide(Strategy.AUTO, gpus, catalog) -> Delivery(envvar=False, cdi={0: "nvidia.com/gpu=GPU-..", ...})
    delivery.hand_out(env, [0]) -> ({..., "NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=GPU-.."},
                                     ("nvidia.com/gpu=GPU-..",))

The device plugin's Allocate and the DRA driver's NodePrepareResources both ask `Delivery`, so the two
node agents never disagree on a node.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from webhook.core.node import cdidevices, devices
from webhook.core.wire import resources


class Strategy(enum.StrEnum):
    AUTO = "auto"
    ENVVAR = "envvar"
    CDI_CRI = "cdi-cri"
    BOTH = "both"


class UnnamedGpu(Exception):
    """A GPU the node's CDI specs do not name, while CDI devices are what this node hands out."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """What this node gives a container for its GPUs: env (`envvar`) and/or a CDI device per GPU (`cdi`)."""

    strategy: Strategy
    envvar: bool
    uses_cdi: bool
    catalog: cdidevices.Catalog
    cdi: Mapping[int, str] = field(default_factory=dict)  # GPU index -> CDI device ID
    unnamed: tuple[devices.Gpu, ...] = ()

    @property
    def mode(self) -> str:
        """What is handed out, as a strategy name: envvar, cdi-cri or both (never auto)."""
        if self.envvar and self.uses_cdi:
            return Strategy.BOTH.value
        return Strategy.CDI_CRI.value if self.uses_cdi else Strategy.ENVVAR.value

    def describe(self) -> str:
        """One line for the log: what was chosen and why."""
        folders = ", ".join(self.catalog.folders)
        kind = self.catalog.kind
        named = len(self.cdi)
        total = named + len(self.unnamed)
        if not self.uses_cdi:
            why = (
                f"no CDI spec in {folders} names a GPU of this node as {kind}"
                if self.strategy is Strategy.AUTO
                else "set by --device-list-strategy"
            )
            env = resources.ENV_VISIBLE_DEVICES
            return f"GPUs handed to containers as {env} (device-list {self.mode}): {why}"
        line = (
            f"GPUs handed to containers as CDI devices {kind} (device-list {self.mode}, configured "
            f"{self.strategy.value}): the specs in {folders} name {named} of {total} GPUs"
        )
        if self.unnamed:
            line += "; not named: " + ", ".join(f"GPU {g.index} ({g.uuid})" for g in self.unnamed)
        return line

    def cdi_devices(self, gpus: Iterable[int]) -> tuple[str, ...]:
        """The CDI device IDs of these GPU indexes, in index order; () when CDI is not used. UnnamedGpu
        naming the GPU, the kind and the folders read when a spec does not name one."""
        if not self.uses_cdi:
            return ()
        chosen = sorted(set(gpus))
        missing = [g for g in chosen if g not in self.cdi]
        if missing:
            by_index = {g.index: g for g in self.unnamed}
            what = ", ".join(
                f"GPU {i} ({by_index[i].uuid})" if i in by_index else f"GPU {i}" for i in missing
            )
            many = len(missing) > 1
            are, them = ("are not CDI devices", "them") if many else ("is not a CDI device", "it")
            raise UnnamedGpu(
                f"{what} {are} of kind {self.catalog.kind} in the specs read from "
                f"{', '.join(self.catalog.folders)} (device-list strategy {self.strategy.value}): without "
                f"{them} the container would start without its GPU. Write the node's CDI spec (the NVIDIA "
                "Container Toolkit's `nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml`), or, on a "
                "node whose runtime is the NVIDIA runtime, hand GPUs out as env (chart value "
                "cdi.deviceListStrategy=envvar)"
            )
        return tuple(self.cdi[g] for g in chosen)

    def hand_out(self, env: Mapping[str, str], gpus: Iterable[int]) -> tuple[dict[str, str], tuple[str, ...]]:
        """The env and CDI devices of a container holding these GPU indexes, `env` being its gpushare env
        (NVIDIA_VISIBLE_DEVICES by UUID). With CDI alone, NVIDIA_VISIBLE_DEVICES names the same CDI devices
        fully qualified: an NVIDIA runtime that reads the env (legacy or CDI mode) then resolves exactly
        these devices through CDI, where bare UUIDs would be taken for the default CDI kind's (unresolvable
        on GPU Operator nodes) and no value at all would let an image's `NVIDIA_VISIBLE_DEVICES=all` through.
        UnnamedGpu as `cdi_devices`."""
        found = self.cdi_devices(gpus)
        out = dict(env)
        if not self.envvar:
            out[resources.ENV_VISIBLE_DEVICES] = ",".join(found)
        return out, found


def decide(strategy: Strategy, gpus: Sequence[devices.Gpu], catalog: cdidevices.Catalog) -> Delivery:
    """The delivery for this node's `gpus` under `strategy` and what its CDI specs name."""
    named: dict[int, str] = {}
    unnamed: list[devices.Gpu] = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        device = cdidevices.gpu_device(catalog, gpu)
        if device is None:
            unnamed.append(gpu)
        else:
            named[gpu.index] = device
    if strategy is Strategy.AUTO:
        uses_cdi = bool(named)
        envvar = not uses_cdi
    else:
        uses_cdi = strategy in (Strategy.CDI_CRI, Strategy.BOTH)
        envvar = strategy in (Strategy.ENVVAR, Strategy.BOTH)
    return Delivery(strategy, envvar, uses_cdi, catalog, named if uses_cdi else {}, tuple(unnamed))


def env_only(gpus: Sequence[devices.Gpu] = ()) -> Delivery:
    """The delivery of a node agent that reads no CDI spec: NVIDIA_VISIBLE_DEVICES, as before CDI."""
    return decide(Strategy.ENVVAR, gpus, cdidevices.Catalog(cdidevices.NVIDIA_KIND, frozenset(), ()))
