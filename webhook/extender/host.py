"""What the verbs (filter, prioritize, bind) need of the app that serves them: the cache, the binder, the
settings, who leads, the metrics registry and the loop's binding API.

Its own module so that `verbs` depends on this small interface and `app` on `verbs`, never both ways: the
app (`app.ExtenderApp`) is one `Host`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry

from webhook.extender.bind import calls
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import Cache
from webhook.extender.settings import ExtenderSettings


@dataclass
class Leadership:
    """Who binds: `is_leader()`, the current holder's identity (for messages) and the URL it published
    on the Lease (where a follower forwards bind; "" when unknown)."""

    is_leader: Callable[[], bool] = lambda: True
    holder: Callable[[], str] = lambda: ""
    leader_url: Callable[[], str] = lambda: ""


class Host(Protocol):
    cache: Cache
    binder: Binder
    settings: ExtenderSettings
    leadership: Leadership
    registry: CollectorRegistry
    loop_api: calls.AsyncBindingApi | None  # None: binds run on threads
