"""`GET /healthz` (alive), `GET /readyz` (serving: certificates loaded, listening) and `GET /metrics`.

`probe_routes(readiness, registry)` returns Starlette routes that any of our apps mounts as they are.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

HEALTHZ = "/healthz"
READYZ = "/readyz"
METRICS = "/metrics"


class Readiness:
    """A readiness flag the server sets once it listens with its certificates loaded, plus any extra
    checks the app adds (e.g. the extender's cache synced)."""

    def __init__(self) -> None:
        self._serving = threading.Event()
        self._checks: dict[str, Callable[[], bool]] = {}

    def set_serving(self, serving: bool) -> None:
        if serving:
            self._serving.set()
        else:
            self._serving.clear()

    def add_check(self, name: str, check: Callable[[], bool]) -> None:
        self._checks[name] = check

    def failing(self) -> list[str]:
        """Names of what is not ready yet (empty when ready)."""
        out = [] if self._serving.is_set() else ["serving"]
        for name, check in self._checks.items():
            try:
                ok = check()
            except Exception:
                ok = False
            if not ok:
                out.append(name)
        return out


HEALTHY: dict[str, Any] = {"status": "ok"}


def ready_answer(readiness: Readiness) -> tuple[int, dict[str, Any]]:
    """/readyz's status and JSON body, for the app's route and a plain probe port alike."""
    failing = readiness.failing()
    if failing:
        return 503, {"status": "not ready", "failing": failing}
    return 200, {"status": "ready"}


def plain_routes(readiness: Readiness) -> dict[str, Callable[[], tuple[int, str, bytes]]]:
    """/healthz and /readyz as `probeserver` routes (status, Content-Type, body), answering as the app's."""

    def healthz() -> tuple[int, str, bytes]:
        return 200, "application/json", json.dumps(HEALTHY).encode()

    def readyz() -> tuple[int, str, bytes]:
        status, body = ready_answer(readiness)
        return status, "application/json", json.dumps(body).encode()

    return {HEALTHZ: healthz, READYZ: readyz}


def probe_routes(readiness: Readiness, registry: CollectorRegistry) -> list[Route]:
    async def healthz(request: Request) -> Response:
        return JSONResponse(HEALTHY)

    async def readyz(request: Request) -> Response:
        status, body = ready_answer(readiness)
        return JSONResponse(body, status_code=status)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return [
        Route(HEALTHZ, healthz, methods=["GET"]),
        Route(READYZ, readyz, methods=["GET"]),
        Route(METRICS, metrics, methods=["GET"]),
    ]
