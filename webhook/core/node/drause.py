"""What our DRA driver's GPUs hold, as the API says: each node's GPUs from its ResourceSlice, and the shares
kube-scheduler allocated from the ResourceClaims' `status.allocation` (device, consumedCapacity, shareID),
for `gpushare inspect` to show beside the extender's placements.

    gpus([slice of node-1 with gpu-0: 16Gi], "gpushare.aliyun.com")
    -> {"node-1": {0: DraGpu(0, 16384, "GPU-a", "Tesla T4")}}
    shares([claim allocated 3Gi of gpu-0 in pool node-1, reserved for pod train], "gpushare.aliyun.com", gpus)
    -> Found((DraShare("node-1", 0, 3072, "ml", "train-gpu-x7k2q", ("train",), "7f1c..."),), ())
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from webhook.core.node import draslice
from webhook.core.wire import quantity

GROUP = draslice.API_VERSION.partition("/")[0]  # resource.k8s.io
_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class DraGpu:
    index: int
    memory_mib: int  # the slice's memory capacity (whole units of the driver's step)
    uuid: str = ""
    model: str = ""


@dataclass(frozen=True, slots=True)
class DraShare:
    """One allocation result of our driver: `mib` of GPU `gpu` on `node` held by a claim."""

    node: str  # the pool: our driver names it after its node
    gpu: int
    mib: int
    namespace: str
    claim: str
    pods: tuple[str, ...]  # the pods status.reservedFor names; () while no pod uses the claim
    share_id: str = ""


class Found(NamedTuple):
    shares: tuple[DraShare, ...]
    problems: tuple[tuple[str, str], ...]  # (node, what could not be read)


def _object(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _mib(raw: object) -> int | None:
    """A memory quantity in MiB, rounded up; None when it is no positive quantity."""
    try:
        amount = quantity.from_json(raw).value
    except quantity.QuantityError:
        return None
    if amount <= 0:
        return None
    return int(-(-amount // _MIB))


def gpus(slices: Iterable[Mapping[str, Any]], driver: str) -> dict[str, dict[int, DraGpu]]:
    """Node -> GPU index -> GPU, from the ResourceSlices of `driver` (others are not ours)."""
    out: dict[str, dict[int, DraGpu]] = {}
    for item in slices:
        spec = _object(item.get("spec"))
        node = _text(spec.get("nodeName"))
        if spec.get("driver") != driver or not node:
            continue
        devices = spec.get("devices")
        for raw_device in devices if isinstance(devices, list) else ():
            device = _object(raw_device)
            index = draslice.gpu_index(_text(device.get("name")))
            memory = _mib(_object(_object(device.get("capacity")).get(draslice.CAPACITY)).get("value"))
            if index is None or memory is None:
                continue
            attributes = _object(device.get("attributes"))
            uuid = _text(_object(attributes.get("uuid")).get("string"))
            model = _text(_object(attributes.get("model")).get("string"))
            out.setdefault(node, {})[index] = DraGpu(index, memory, uuid, model)
    return out


def shares(
    claims: Iterable[Mapping[str, Any]], driver: str, known: Mapping[str, Mapping[int, DraGpu]]
) -> Found:
    """Every allocation result of `driver` in `claims`; a result naming no memory holds the whole GPU
    (`known`, from `gpus`), one on a GPU no slice publishes is a problem of its node."""
    found: list[DraShare] = []
    problems: list[tuple[str, str]] = []
    for claim in claims:
        meta, status = _object(claim.get("metadata")), _object(claim.get("status"))
        namespace, name = _text(meta.get("namespace")), _text(meta.get("name"))
        results = _object(_object(status.get("allocation")).get("devices")).get("results")
        if not isinstance(results, list):
            continue  # not allocated
        reserved = status.get("reservedFor")
        pods = tuple(
            _text(r.get("name"))
            for r in (reserved if isinstance(reserved, list) else ())
            if isinstance(r, Mapping) and r.get("resource") == "pods" and _text(r.get("name"))
        )
        for raw_result in results:
            result = _object(raw_result)
            if result.get("driver") != driver:
                continue
            node, device = _text(result.get("pool")), _text(result.get("device"))
            index = draslice.gpu_index(device)
            gpu = known.get(node, {}).get(index) if index is not None else None
            if index is None or gpu is None:
                problems.append((node, f"claim {namespace}/{name}: device {device!r} is in no ResourceSlice"))
                continue
            raw = _object(result.get("consumedCapacity")).get(draslice.CAPACITY)
            mib = gpu.memory_mib if raw is None else _mib(raw)
            if mib is None:
                problems.append((node, f"claim {namespace}/{name}: consumed memory {raw!r} is no quantity"))
                continue
            share_id = _text(result.get("shareID"))
            found.append(DraShare(node, index, mib, namespace, name, pods, share_id))
    return Found(tuple(found), tuple(problems))
