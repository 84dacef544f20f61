"""One verdict for one object: the rule violations, warnings and isolation choice of every pod template.

INTERFACE (owned by the core-rules helper; the webhook and `gpushare check` both call `evaluate`, so the
same object gives the same messages in both places).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core import resources


@dataclass(frozen=True, slots=True)
class IsolationPolicy:
    label_key: str = resources.ISOLATION_KEY  # the nodeSelector key
    annotation_key: str = resources.ISOLATION_KEY  # the pod annotation that chooses
    env_name: str = resources.CGPU_DISABLE_ENV
    default: str = "false"  # the value when nothing in the pod says otherwise


@dataclass(frozen=True, slots=True)
class Policy:
    names: resources.GpuResourceNames = field(default_factory=resources.GpuResourceNames)
    isolation: IsolationPolicy = field(default_factory=IsolationPolicy)
    # When set, the mutating webhook also sets spec.schedulerName on gpu-mem pods that left it unset
    # (or set it to "default-scheduler"): the chart's second-scheduler mode.
    scheduler_name: str | None = None


def evaluate(obj: Mapping[str, Any], policy: Policy) -> Any:
    raise NotImplementedError
