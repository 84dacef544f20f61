"""One verdict for one object: the rule violations, warnings and isolation choice of every pod template.

The webhook and `gpushare check` both call `evaluate`, so the same object gives the same messages in both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from webhook.core.admission import claims, isolation, lookalikes
from webhook.core.specs import finding, podread, templates
from webhook.core.specs.finding import Finding
from webhook.core.wire import patches, resources
from webhook.core.wire.units import unit_mib

# Defined beside the decision that reads it (isolation must not import verdict); kept here by name.
IsolationPolicy = isolation.IsolationPolicy

# The API server (k8s.io/apiserver pkg/endpoints/filters/warning.go) keeps warnings of up to 120
# characters whole and drops any with control characters.
WARNING_LIMIT = 120
# A denial lists at most this many problems and characters, then says how many more there are: a Pod
# with 40,000 bad containers must not get a 9 MB answer that the API server stores in events and kubectl
# prints whole. Here, not in the webhook, so `gpushare check` shows the same message.
MAX_LISTED_PROBLEMS = 20
# At most this many warnings, the last saying how many more there were (the webhook's answer and
# `gpushare check` alike): the API server prints every warning it gets to the client.
MAX_WARNINGS = 20
MAX_MESSAGE_CHARS = 8192
_LINE_LIMIT = MAX_MESSAGE_CHARS // 4  # one problem line at most; paths and values are clipped before
_CLOSING_ROOM = 80  # for the "... and N more" line
_DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True, slots=True)
class Policy:
    names: resources.GpuResourceNames = field(default_factory=resources.GpuResourceNames)
    isolation: IsolationPolicy = field(default_factory=IsolationPolicy)
    # When set, the mutating webhook also sets spec.schedulerName on gpu-mem and whole-card pods that left
    # it unset (or set it to "default-scheduler"): the chart's second-scheduler mode.
    scheduler_name: str | None = None
    # The unit of one gpu-mem (GiB, MiB or <N>MiB), as the extender and device plugin count it; messages
    # name it and suggest values in it.
    memory_unit: str = podread.DEFAULT_UNIT
    # Our DRA DeviceClasses, the driver's memory step and the largest GPU: ResourceClaims and their
    # templates are checked against them (core/admission/claims.py).
    claims: claims.ClaimPolicy = field(default_factory=claims.ClaimPolicy)
    # A gpu-mem share or claim under this many MiB is allowed with a warning: it may not hold the CUDA
    # context of the process (0: no warning).
    min_share_mib: int = podread.SMALL_SHARE_MIB
    # MiB in one unit of memory_unit, read once here rather than per review.
    unit_mib: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # ValueError naming the unit, at startup rather than per review
        object.__setattr__(self, "unit_mib", unit_mib(self.memory_unit))
        if self.min_share_mib < 0:
            raise ValueError(f"the least share must be 0 MiB (no warning) or more, got {self.min_share_mib}")


# TemplateVerdict and Verdict are NamedTuples, not frozen dataclasses: one of each per review, each
# ~0.4 us cheaper to build.
class TemplateVerdict(NamedTuple):
    path: str
    violations: tuple[Finding, ...]
    warnings: tuple[str, ...]
    isolation: str | None  # the nodeSelector value the webhook adds (or would add) to this template's pods
    scheduler_name: str | None  # the schedulerName the webhook adds (Policy.scheduler_name mode), else None


class Verdict(NamedTuple):
    templates: tuple[TemplateVerdict, ...]
    violations: tuple[Finding, ...]  # all, in a stable order
    # De-duplicated, each <= 120 characters, no control characters; at most MAX_WARNINGS (the last then
    # says how many more).
    warnings: tuple[str, ...]
    allowed: bool
    kind: str = ""  # the object's kind, for the message's first line

    def message(self) -> str:
        """The denial message, identical for the webhook and `gpushare check`; "" when allowed.

        A first line, then one line per violation (at most MAX_LISTED_PROBLEMS, MAX_MESSAGE_CHARS in all,
        then how many more); the API server shows it after `admission webhook "NAME" denied the request: `.
        """
        if not self.violations:
            return ""
        count = len(self.violations)
        problems = "1 problem" if count == 1 else f"{count} problems"
        kept = [f"{self.kind or 'the object'} has {problems} with GPU resources:"]
        size = len(kept[0])
        for violation in self.violations[:MAX_LISTED_PROBLEMS]:
            line = finding.printable(str(violation), _LINE_LIMIT)
            if size + 1 + len(line) > MAX_MESSAGE_CHARS - _CLOSING_ROOM:
                break
            kept.append(line)
            size += 1 + len(line)
        more = count - (len(kept) - 1)
        if more:
            kept.append(f"... and {more} more (fix these and apply again)")
        return "\n".join(kept)


def ratchet(found: Verdict, before: Verdict) -> Verdict:
    """`found` less the violations `before` (the object as it was) already had: an UPDATE is denied only
    for what it breaks, so an object created before a rule (or before the webhook) can still get its
    labels, annotations or finalizers changed. Pod resources cannot change on UPDATE at all."""
    had = {str(v) for v in before.violations}
    kept = tuple(v for v in found.violations if str(v) not in had)
    if len(kept) == len(found.violations):
        return found
    dropped = len(found.violations) - len(kept)
    note = clean_warning(f"{dropped} GPU resource problem(s) the object already had are left as they are")
    warnings = found.warnings if len(found.warnings) >= MAX_WARNINGS else (*found.warnings, note)
    return found._replace(violations=kept, warnings=warnings, allowed=not kept)


def clean_warning(text: str) -> str:
    """One warning the API server passes on: one line, no control characters, at most 120 characters."""
    return finding.printable(text, WARNING_LIMIT)


def _unique(texts: list[str]) -> tuple[str, ...]:
    if not texts:
        return ()  # most objects: no warning, and the generator below costs more than the check
    return tuple(dict.fromkeys(clean_warning(t) for t in texts))


def _capped(warnings: tuple[str, ...]) -> tuple[str, ...]:
    if len(warnings) <= MAX_WARNINGS:
        return warnings
    more = len(warnings) - MAX_WARNINGS + 1
    return (*warnings[: MAX_WARNINGS - 1], f"... and {more} more warnings")


def _scheduler(spec: Mapping[str, Any], policy: Policy, asks: bool) -> tuple[str | None, list[str]]:
    if policy.scheduler_name is None or not asks:
        return None, []
    current = spec.get("schedulerName")
    if current in (None, "", _DEFAULT_SCHEDULER):
        return policy.scheduler_name, []
    if current != policy.scheduler_name:
        shown = finding.show(current)
        return None, [
            f"schedulerName {shown} is kept; gpu-mem pods need {policy.scheduler_name} to be placed"
        ]
    return None, []


def _template_verdict(template: templates.PodTemplate, policy: Policy) -> TemplateVerdict:
    # One read of the template (its containers walked, each GPU quantity parsed once) serves every rule.
    read = podread.read(template, policy.names, policy.memory_unit)
    view = read.view
    violations = read.findings()
    decision = isolation.decide_view(view, policy.isolation)
    if decision.violation is not None:
        violations.append(decision.violation)
    # Only the scheduler-name mode needs to know; a decided value already says the pod asks for gpu-mem.
    # Whole cards too: on shared nodes only the extender keeps them off GPUs that hold shares.
    scheduler, warnings = None, [*decision.warnings]
    if policy.scheduler_name is not None:
        asks = decision.value is not None or view.asks_memory() or view.asks_cards()
        scheduler, scheduler_warnings = _scheduler(view.spec, policy, asks)
        warnings += scheduler_warnings
    if policy.min_share_mib > policy.unit_mib:  # else no share is under it (GiB and the default 512)
        warnings += read.small_shares(policy.min_share_mib)
    if any(c.other_names for c in view.containers):  # names that might be misspelt GPU names
        warnings += lookalikes.warnings(view)
    return TemplateVerdict(template.path, tuple(violations), _unique(warnings), decision.value, scheduler)


def evaluate(obj: Mapping[str, Any], policy: Policy) -> Verdict:
    """Check every pod template of `obj` (any JSON value: wrong types become violations, never errors)."""
    if not isinstance(obj, templates.OBJECT):
        problem = finding.wrong_type("", None, obj, "an object (a Kubernetes manifest)")
        return Verdict((), (problem,), (), allowed=False)
    kind = obj.get("kind")
    kind = finding.printable(kind, 63) if isinstance(kind, str) else ""
    if kind in claims.SPEC_PATHS and claims.is_claim(obj):  # no pod template: the claim's requests
        asked = claims.check(obj, policy.claims, policy.min_share_mib)
        warned = _capped(_unique(list(asked.warnings)))
        return Verdict((), asked.violations, warned, not asked.violations, kind)
    found = templates.scan(obj)
    violations = [
        Finding(
            m.path,
            None,
            None,
            f"has the wrong type: expected {m.expected}, got {m.actual}",
            f"write this field as {m.expected}",
        )
        for m in found.malformed
    ]
    warnings: list[str] = []
    if found.truncated is not None:
        warnings.append(f"not checked from {found.truncated} on: the object is too deep or too large")
    verdicts = tuple([_template_verdict(t, policy) for t in found.templates])
    for tv in verdicts:
        violations += tv.violations
        if tv.warnings:  # a workload may hold several templates: say which one a warning is about
            warnings += [f"{tv.path}: {w}" if tv.path else w for w in tv.warnings]
    return Verdict(verdicts, tuple(violations), _capped(_unique(warnings)), not violations, kind)


def mutation_patch(pod: Mapping[str, Any], verdict: Verdict, policy: Policy) -> list[dict[str, Any]]:
    """JSON Patch operations for a Pod (CREATE); [] when nothing is to be added or the pod is denied.

    Workloads are never patched: their Pods are, when they are created.
    """
    if not verdict.allowed or not verdict.templates:
        return []
    root = verdict.templates[0]  # the object's own template comes first (templates.scan: document order)
    if root.path or (root.isolation is None and root.scheduler_name is None):
        return []
    if not isinstance(pod, templates.OBJECT) or pod.get("kind") not in (None, "Pod"):
        return []
    spec = pod.get("spec")
    if not isinstance(spec, templates.OBJECT):
        return []
    ops: list[dict[str, Any]] = []
    if root.isolation is not None:
        ops += patches.node_selector_ops(spec, policy.isolation.label_key, root.isolation)
    if root.scheduler_name is not None:
        ops += patches.scheduler_name_ops(spec, root.scheduler_name)
    return patches.checked(ops)
