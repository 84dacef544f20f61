"""The rules for DRA claims of our DeviceClasses: a ResourceClaim's or ResourceClaimTemplate's requests that
name the share class (a share of one GPU's memory) or the whole-GPU class, as Findings and warnings in
the words of the pod rules. The webhook and `gpushare check` both reach them through `verdict.evaluate`.

    check({"kind": "ResourceClaim", "apiVersion": "resource.k8s.io/v1", "spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpushare-memory",
                                    "capacity": {"requests": {"memory": "3"}}}}]}}}, ClaimPolicy())
    -> Found((Finding("spec.devices.requests[0].exactly.capacity.requests.memory", None, "3",
              "is read as 3 bytes: ...", "write 3Gi"),), ())
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from webhook.core.specs import finding, gpumem, templates
from webhook.core.specs.finding import Finding
from webhook.core.wire import quantity, resources

GROUP = "resource.k8s.io"
# Where each kind keeps its claim spec (a template's is the spec of the claims made from it).
SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "ResourceClaim": ("spec",),
    "ResourceClaimTemplate": ("spec", "spec"),
}
CAPACITY = "memory"  # the one capacity our driver publishes (core/node/draslice.py)
MIB = 1 << 20
GIB = 1 << 30
# The largest GPU memory a claim may ask, unless configured: an 80 GiB A100/H100.
DEFAULT_MAX_MEMORY = 80 * GIB
_NAME_LIMIT = 63


class PolicyError(ValueError):
    """A claim policy that cannot be used (a step or maximum that is no whole number of MiB)."""


@dataclass(frozen=True, slots=True)
class ClaimPolicy:
    """Our DeviceClass names and the driver's memory step and largest GPU, in bytes."""

    share_class: str = resources.DRA_SHARE_CLASS
    whole_class: str = resources.DRA_WHOLE_CLASS
    step: int = GIB  # the request policy's step: 1Gi, or the chart's dra.mibStep MiB in MiB mode
    max_memory: int = DEFAULT_MAX_MEMORY

    def __post_init__(self) -> None:
        for name, value in (("memory step", self.step), ("largest GPU memory", self.max_memory)):
            if value <= 0 or value % MIB:
                raise PolicyError(f"the {name} must be a whole number of MiB above 0, e.g. 1Gi")
        if self.max_memory < self.step:
            raise PolicyError(f"the largest GPU memory ({size(self.max_memory)}) is less than one step")


class Found(NamedTuple):
    violations: tuple[Finding, ...]
    warnings: tuple[str, ...]


def size(amount: int) -> str:
    """Bytes (a whole number of MiB) as the API server writes them: 3221225472 -> "3Gi"."""
    return quantity.parse(f"{amount // MIB}Mi").canonical()


def is_claim(obj: Mapping[str, Any]) -> bool:
    """Whether `obj` is a ResourceClaim or ResourceClaimTemplate of resource.k8s.io (any version)."""
    api_version = obj.get("apiVersion")
    return (
        obj.get("kind") in SPEC_PATHS
        and isinstance(api_version, str)
        and api_version.partition("/")[0] == GROUP
    )


def check(obj: Mapping[str, Any], policy: ClaimPolicy, least_mib: int = 0) -> Found:
    """Every problem of the requests naming our classes, in request order; other requests are not ours.
    A share under `least_mib` MiB (as the driver rounds it) gets a warning (0: none)."""
    found = _Found([], [], least_mib)
    node: object = obj
    path = ""
    for part in SPEC_PATHS[obj["kind"]]:
        assert isinstance(node, templates.OBJECT)
        node = node.get(part)
        path = finding.join(path, part)
        if node is None:
            return Found((), ())
        if not isinstance(node, templates.OBJECT):
            found.wrong(path, node, "an object")
            return found.done()
    assert isinstance(node, templates.OBJECT)
    devices = node.get("devices")
    path = finding.join(path, "devices")
    if devices is None:
        return Found((), ())
    if not isinstance(devices, templates.OBJECT):
        found.wrong(path, devices, "an object")
        return found.done()
    requests = devices.get("requests")
    path = finding.join(path, "requests")
    if requests is not None and not isinstance(requests, list):
        found.wrong(path, requests, "a list")
    for i, request in enumerate(requests if isinstance(requests, list) else ()):
        where = f"{path}[{i}]"
        if not isinstance(request, templates.OBJECT):
            continue  # no class to read: the API server's to refuse
        name = _name(request.get("name"), i)
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if isinstance(exactly, templates.OBJECT):
            _check_request(exactly, f"{where}.exactly", name, policy, found)
        if isinstance(first, list):
            for j, sub in enumerate(first):
                if isinstance(sub, templates.OBJECT):
                    label = f"{name}/{_name(sub.get('name'), j)}"
                    _check_request(sub, f"{where}.firstAvailable[{j}]", label, policy, found)
        if exactly is None and first is None:
            _check_request(request, where, name, policy, found)  # v1beta1: the request is the exact one
    return found.done()


class _Found(NamedTuple):
    violations: list[Finding]
    warnings: list[str]
    least_mib: int = 0  # the least share without a warning

    def wrong(self, path: str, value: object, expected: str) -> None:
        self.violations.append(finding.wrong_type(path, None, value, expected))

    def add(self, path: str, value: object, problem: str, fix: str) -> None:
        shown = None if value is None else finding.show(value)
        self.violations.append(Finding(path, None, shown, problem, fix))

    def done(self) -> Found:
        return Found(tuple(self.violations), tuple(self.warnings))


def _name(value: object, index: int) -> str:
    return finding.printable(value, _NAME_LIMIT) if isinstance(value, str) and value else f"#{index}"


def _check_request(
    request: Mapping[str, Any], path: str, name: str, policy: ClaimPolicy, found: _Found
) -> None:
    """One exact request or subrequest: its class, count, allocation mode and capacity."""
    cls = request.get("deviceClassName")
    if cls not in (policy.share_class, policy.whole_class):
        return
    asked = _asked(request, path, found)
    if asked is None:
        return
    capacity_path = f"{path}.capacity.requests"
    for key in asked:
        if key != CAPACITY:
            found.add(
                finding.key_path(capacity_path, key),
                None,
                f"the GPUs of class {cls} publish no capacity {finding.show(key)}, only {CAPACITY}, "
                "so no GPU would fit the claim",
                f"remove it (they publish {CAPACITY} only)",
            )
    memory = asked.get(CAPACITY)
    if cls == policy.whole_class:
        if memory is not None:
            found.add(
                f"{capacity_path}.{CAPACITY}",
                memory,
                f"class {cls} holds whole GPUs; a memory request is a share of one GPU",
                f"for a share, write deviceClassName: {policy.share_class}; for a whole GPU, remove capacity",
            )
        return
    counted = _count_problem(request, path, memory, policy, found)
    if memory is None:
        if not counted:
            found.warnings.append(
                f"request {name}: {cls} without capacity.requests.memory holds a whole GPU; "
                f"for that, use {policy.whole_class}"
            )
        return
    _check_memory(memory, f"{capacity_path}.{CAPACITY}", name, policy, found)


def _asked(request: Mapping[str, Any], path: str, found: _Found) -> Mapping[str, Any] | None:
    """`capacity.requests` ({} when absent); None when either is of the wrong type (reported)."""
    node: Mapping[str, Any] = request
    for key in ("capacity", "requests"):
        value = node.get(key)
        path = f"{path}.{key}"
        if value is None:
            return {}
        if not isinstance(value, templates.OBJECT):
            found.wrong(path, value, "an object")
            return None
        node = value
    return node


def _count_problem(
    request: Mapping[str, Any], path: str, memory: object, policy: ClaimPolicy, found: _Found
) -> bool:
    """A count where a share is meant: allocationMode All, or a count above 1, on the share class."""
    share, whole = policy.share_class, policy.whole_class
    if request.get("allocationMode") == "All":
        found.add(
            f"{path}.allocationMode",
            "All",
            f"takes a share of every GPU of the node; class {share} is for a share of one GPU",
            f"remove allocationMode (one GPU is the default); for every GPU whole, use {whole}",
        )
        return True
    count = request.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 1:
        return False
    if memory is None:
        problem = f"asks for {count} whole GPUs (no memory is asked), not {count} GiB of one"
        fix = (
            f"for {count} GiB of one GPU, remove count and write capacity: "
            f"{{requests: {{memory: {count}Gi}}}}; for {count} whole GPUs, use deviceClassName: {whole}"
        )
    else:
        problem = f"asks for {count} GPUs with this memory on each; class {share} is for a share of one GPU"
        fix = "remove count and ask the share's memory; for shares of several GPUs, write one request per GPU"
    found.add(f"{path}.count", count, problem, fix)
    return True


def _check_memory(raw: object, path: str, name: str, policy: ClaimPolicy, found: _Found) -> None:
    """capacity.requests.memory: a size in bytes, at most the largest GPU, rounded up to the step."""
    parsed = gpumem.parse(raw)
    if isinstance(parsed, str):
        found.add(path, raw, f"is not a valid quantity: {parsed}", "write a size with its unit, e.g. 4Gi")
        return
    if parsed.is_negative() or parsed.is_zero():
        found.add(path, raw, "must be more than 0", "write the memory of the share, e.g. 4Gi")
        return
    amount = parsed.value
    if amount < MIB:
        # A count of GiB written as for aliyun.com/gpu-mem: "3" is 3 bytes, rounded up to a whole step.
        whole = amount.denominator == 1 and amount * GIB <= policy.max_memory
        fix = f"write {amount.numerator}Gi" if whole else "write a size with its unit, e.g. 4Gi"
        found.add(
            path,
            raw,
            f"is read as {_number(parsed)} bytes: memory is a size in bytes (aliyun.com/gpu-mem counts GiB, "
            "a claim does not)",
            fix,
        )
        return
    if amount > policy.max_memory:
        found.add(
            path,
            raw,
            f"is more than the largest GPU has ({size(policy.max_memory)}): "
            "no GPU could hold it and the pod would stay Pending",
            f"ask at most {size(policy.max_memory)}; with larger GPUs, raise dra.maxClaimMemory "
            "(the webhook's dra.maxMemory)",
        )
        return
    steps = -(-amount // policy.step)
    if steps * policy.step != amount:
        rounded = size(int(steps) * policy.step)
        found.warnings.append(
            f"request {name}: memory {finding.show(raw)} is rounded up to {rounded} "
            f"(steps of {size(policy.step)}); ask {rounded}"
        )
    granted = int(steps) * policy.step // MIB  # what the driver gives the claim
    if gpumem.under_least(granted, found.least_mib):
        least = size(-(-found.least_mib // (policy.step // MIB)) * policy.step)
        found.warnings.append(gpumem.small_share(f"request {name}", granted, least))


def _number(parsed: quantity.Quantity) -> str:
    value = parsed.value  # under 1 MiB here
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"
