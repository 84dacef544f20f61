"""A node's GPU scheduling mode (`ack.node.gpu.schedule`) and GPU placement label (`ack.node.gpu.placement`).

One table, read by the device plugin (what it advertises, which env it gives), the extender (which nodes
take shares or whole cards from us, which placement policy) and `gpushare inspect` (the mode column):

| mode     | our plugin advertises | whole cards served by | memory isolation of shares                  |
|----------|-----------------------|-----------------------|---------------------------------------------|
| default  | nothing               | NVIDIA's plugin       | none (cards are exclusive)                  |
| topology | nothing               | NVIDIA's plugin (ACK) | none                                        |
| share    | gpu-mem, whole cards  | ours                  | none                                        |
| cgpu     | gpu-mem, whole cards  | ours                  | cGPU, unless cgpu.disable.isolation=true    |
| mps      | gpu-mem, whole cards  | ours                  | NVIDIA MPS (Volta or newer)                 |
| dra      | nothing (DRA driver)  | our DRA driver        | none                                        |
| dra-mps  | nothing (DRA driver)  | our DRA driver        | NVIDIA MPS (Volta or newer)                 |

On `dra` and `dra-mps` nodes kube-scheduler itself allocates GPU memory from our DRA driver's
ResourceSlice (ResourceClaims with a memory capacity; docs/dra.md): neither the extender nor the device
plugin serves them.

A node without the label keeps the original gpushare behaviour (`share`, isolation from its
`cgpu.disable.isolation` label): `LEGACY`. An unknown value serves nothing and is reported, never guessed.

    node_mode({"ack.node.gpu.schedule": "cgpu"})  -> Mode.CGPU
    node_mode({})                                  -> Mode.SHARE  (legacy)
    node_mode({"ack.node.gpu.schedule": "Cgpu"})   -> ModeError
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from webhook.core.placement import allocator
from webhook.core.placement.allocator import Policy
from webhook.core.wire import resources

MODE_LABEL = resources.ACK_SCHEDULE_LABEL
PLACEMENT_LABEL = "ack.node.gpu.placement"


class ModeError(ValueError):
    """A node label whose value is not one of the documented ones; the message names the label and values."""


class Mode(enum.StrEnum):
    DEFAULT = "default"
    TOPOLOGY = "topology"
    SHARE = "share"
    CGPU = "cgpu"
    MPS = "mps"
    DRA = "dra"
    DRA_MPS = "dra-mps"

    @property
    def shares(self) -> bool:
        """Our device plugin serves this node: gpu-mem shares and whole cards beside them."""
        return self in _SHARED

    @property
    def dra(self) -> bool:
        """Our DRA driver serves this node: shares and whole cards are ResourceClaims."""
        return self in _DRA


_SHARED = frozenset({Mode.SHARE, Mode.CGPU, Mode.MPS})
_DRA = frozenset({Mode.DRA, Mode.DRA_MPS})
LEGACY = Mode.SHARE
_VALUES = tuple(m.value for m in Mode)


def node_mode(labels: Mapping[str, object] | None) -> Mode:
    """The node's mode from its labels; LEGACY when unlabelled; ModeError for a value we do not know."""
    raw = (labels or {}).get(MODE_LABEL)
    if raw is None:
        return LEGACY
    if isinstance(raw, str) and raw in _VALUES:
        return Mode(raw)
    allowed = ", ".join(_VALUES)
    raise ModeError(f"node label {MODE_LABEL}={raw!r} is not a known mode; use one of {allowed}")


def node_placement(labels: Mapping[str, object] | None) -> Policy | None:
    """The node's placement label; None when absent or unknown (the caller falls back to its default).
    A pod's own `gpushare.aliyun.com/placement-policy` annotation wins over it (`placement_policy`)."""
    raw = (labels or {}).get(PLACEMENT_LABEL)
    try:
        return Policy(raw) if isinstance(raw, str) else None
    except ValueError:
        return None


def sharing_problem(
    labels: Mapping[str, object] | None,
    memory: str = resources.GPU_MEMORY,
    share_class: str = resources.DRA_SHARE_CLASS,
) -> str | None:
    """Why a pod asking `memory` may not go to a node with these labels; None when the node shares. On a
    DRA node it gives the ResourceClaimTemplate to use instead, of class `share_class`.

    Names the label and its value, never the node: kube-scheduler counts nodes per distinct reason."""
    try:
        mode = node_mode(labels)
    except ModeError as err:
        return str(err)
    if mode.shares:
        return None
    if mode.dra:
        # The claim to write instead (docs/dra.md), so a Pending pod's events say how to fix it.
        return (
            f"node label {MODE_LABEL}={mode.value}: the node's GPUs are shared through DRA ResourceClaims, "
            f"not {memory}; name in spec.resourceClaims a ResourceClaimTemplate with spec: "
            f"{{spec: {{devices: {{requests: [{{name: gpu, exactly: {{deviceClassName: {share_class}, "
            f"capacity: {{requests: {{memory: <N>Gi}}}}}}}}]}}}}}}, or send the pod to nodes labelled share, "
            "cgpu or mps"
        )
    return (
        f"node label {MODE_LABEL}={mode.value}: the node serves whole GPUs only (nvidia.com/gpu), not "
        f"{memory}; shares go to nodes labelled share, cgpu or mps"
    )


def placement_policy(
    pod_annotations: Mapping[str, str] | None, node_policy: Policy | None, default: Policy
) -> Policy:
    """The placement order: the pod's `gpushare.aliyun.com/placement-policy` annotation, else the node's
    `ack.node.gpu.placement` label (`node_policy`, from `node_placement`), else `default` (the extender's
    --policy, binpack unless set). Unknown values fall through to the next."""
    return chosen_policy(allocator.pod_policy(pod_annotations), node_policy, default)


def chosen_policy(pod_policy: Policy | None, node_policy: Policy | None, default: Policy) -> Policy:
    """`placement_policy` with the pod's annotation already read (`allocator.pod_policy`): filter reads it
    once for every node of a call."""
    return pod_policy or node_policy or default
