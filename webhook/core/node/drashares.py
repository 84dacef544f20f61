"""A ResourceClaim's allocation as the DRA driver reads it at NodePrepareResources, and the CDI edits each
of its requests gives a container.

The kubelet names only the claim; kube-scheduler wrote what it got in `status.allocation.devices.results`:
per result the request, our pool and device, the `shareID` of this share of a device allowing multiple
allocations and its `consumedCapacity` (our `memory`, already rounded to the device's request policy).
Each request becomes one CDI device holding the gpushare env of the GPUs it got (core.node.gpuenv), plus the
MPS limit and mounts on MPS nodes (core.node.mps): a container naming the request gets exactly that.

    read(claim, uid, driver="gpushare.aliyun.com", pool="node-1", gpus=gpus, granularity=Granularity())
    -> ClaimShares((Share("gpu", "gpu-0", 0, 3, "7f1c..."),))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core.node import cdi, devicelist, devices, draslice, gpuenv, mps
from webhook.core.wire import quantity

_BYTES_PER_MIB = 1 << 20


class ClaimError(ValueError):
    """A claim the driver cannot prepare: not allocated, replaced, or naming what this node does not have."""


@dataclass(frozen=True, slots=True)
class Share:
    """One allocation result of ours: `units` of GPU `gpu`'s memory for request `request`."""

    request: str  # the request's name, a subrequest's suffix dropped (the kubelet matches containers on it)
    device: str
    gpu: int
    units: int
    share_id: str = ""


@dataclass(frozen=True, slots=True)
class ClaimShares:
    namespace: str
    name: str
    shares: tuple[Share, ...]

    @property
    def total(self) -> int:
        return sum(s.units for s in self.shares)

    def requests(self) -> dict[str, tuple[Share, ...]]:
        """The shares of each request, in the order the results list them."""
        out: dict[str, list[Share]] = {}
        for share in self.shares:
            out.setdefault(share.request, []).append(share)
        return {request: tuple(found) for request, found in out.items()}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _units(raw: object, gpu: devices.Gpu, granularity: devices.Granularity, where: str) -> int:
    """The consumed memory in units; the whole GPU when the result names none (no capacity asked)."""
    whole = granularity.units(gpu.memory_mib)
    if raw is None:
        return whole
    try:
        amount = quantity.from_json(raw)
    except quantity.QuantityError as err:
        raise ClaimError(f"{where}: consumed memory {raw!r} is not a quantity ({err})") from None
    unit = granularity.mib_per_device * _BYTES_PER_MIB
    value = amount.value
    if value <= 0 or value.denominator != 1 or value.numerator % unit:
        raise ClaimError(
            f"{where}: consumed memory {raw} is not a whole number of {granularity.describe(1)} units "
            "(the driver publishes the GPU with a request policy in those units)"
        )
    units = value.numerator // unit
    if units > whole:
        raise ClaimError(f"{where}: consumed memory {raw} is more than GPU {gpu.index} has")
    return units


def read(
    claim: Mapping[str, Any],
    uid: str,
    *,
    driver: str,
    pool: str,
    gpus: Sequence[devices.Gpu],
    granularity: devices.Granularity,
) -> ClaimShares:
    """The shares of ours in `claim` (as GET returns it), which the kubelet asked for by `uid`."""
    meta = claim.get("metadata") or {}
    namespace, name = _text(meta.get("namespace")), _text(meta.get("name"))
    key = f"ResourceClaim {namespace}/{name}"
    if _text(meta.get("uid")) != uid:
        raise ClaimError(f"{key} has UID {meta.get('uid')!r}, not {uid!r}: it was deleted and made again")
    allocation = (claim.get("status") or {}).get("allocation")
    results = (
        ((allocation or {}).get("devices") or {}).get("results") if isinstance(allocation, dict) else None
    )
    if not isinstance(results, list):
        raise ClaimError(f"{key} is not allocated")
    by_index = {g.index: g for g in gpus}
    shares = []
    for n, result in enumerate(results):
        if not isinstance(result, dict) or result.get("driver") != driver:
            continue
        where = f"{key} result {n}"
        if result.get("pool") != pool:
            raise ClaimError(f"{where}: pool {result.get('pool')!r} is not this node's ({pool!r})")
        device = _text(result.get("device"))
        index = draslice.gpu_index(device)
        gpu = by_index.get(index) if index is not None else None
        if gpu is None:
            raise ClaimError(f"{where}: device {device!r} is not a GPU of this node")
        consumed = result.get("consumedCapacity") or {}
        raw = consumed.get(draslice.CAPACITY) if isinstance(consumed, dict) else None
        request = _text(result.get("request")).split("/", 1)[0]
        if not request:
            raise ClaimError(f"{where}: names no request")
        units = _units(raw, gpu, granularity, where)
        shares.append(Share(request, device, gpu.index, units, _text(result.get("shareID"))))
    return ClaimShares(namespace, name, tuple(shares))


def edits(
    claim: ClaimShares,
    gpus: Sequence[devices.Gpu],
    granularity: devices.Granularity,
    mps_dirs: mps.MpsDirs | None = None,
    delivery: devicelist.Delivery | None = None,
) -> dict[str, cdi.Edits]:
    """{request: what a container naming it gets}: the gpushare env of its GPUs (the claim's whole
    memory as the pod's), and on MPS nodes the per-GPU memory limit and the MPS folders; its
    NVIDIA_VISIBLE_DEVICES as `delivery` hands GPUs out (default: by UUID); devicelist.UnnamedGpu."""
    out: dict[str, cdi.Edits] = {}
    for request, shares in claim.requests().items():
        held: dict[int, int] = {}
        for share in shares:
            held[share.gpu] = held.get(share.gpu, 0) + share.units
        env = gpuenv.container_env(gpus, held, claim.total, granularity)
        if delivery is not None:
            env, _ = delivery.hand_out(env, held)
        mounts: tuple[mps.Mount, ...] = ()
        if mps_dirs is not None:
            env.update(mps.container_env(held, granularity, None, mps_dirs))
            mounts = mps.mounts(mps_dirs)
        out[request] = cdi.Edits(env, mounts)
    return out


def gpu_devices(claim: ClaimShares, delivery: devicelist.Delivery) -> tuple[tuple[str, ...], ...]:
    """Per share, in the order of `claim.shares`: the toolkit's CDI device of its GPU when this node hands
    GPUs out as CDI devices, each GPU once per request (the kubelet gives a container the IDs of every
    result of the requests it names); devicelist.UnnamedGpu when a spec does not name one."""
    given: set[tuple[str, int]] = set()
    out: list[tuple[str, ...]] = []
    for share in claim.shares:
        key = (share.request, share.gpu)
        out.append(() if key in given else delivery.cdi_devices([share.gpu]))
        given.add(key)
    return tuple(out)
