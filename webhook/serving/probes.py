"""`GET /healthz` (alive), `GET /readyz` (serving: certificates loaded, listening) and `GET /metrics`.

`probe_routes(readiness, registry)` returns Starlette routes that any of our apps mounts as they are.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

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


def probe_routes(readiness: Readiness, registry: CollectorRegistry) -> list[Route]:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        failing = readiness.failing()
        if failing:
            return JSONResponse({"status": "not ready", "failing": failing}, status_code=503)
        return JSONResponse({"status": "ready"})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return [
        Route(HEALTHZ, healthz, methods=["GET"]),
        Route(READYZ, readyz, methods=["GET"]),
        Route(METRICS, metrics, methods=["GET"]),
    ]
