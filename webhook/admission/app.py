"""The webhook's Starlette app: POST /mutate and /validate over `review`, plus the probes and /metrics.

HTTP concerns only: method (405), content type (415), body size (413), JSON (400), one log line and one
metric per review. Deciding is `review.review`'s job.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from webhook.admission import codec, review
from webhook.admission.settings import AdmissionSettings
from webhook.core import certificates
from webhook.serving import body as body_limit
from webhook.serving import logs, metrics, probes, server, tls

log = logging.getLogger("webhook.admission")

MUTATE_PATH = "/mutate"
VALIDATE_PATH = "/validate"
METRICS_NAMESPACE = "gpushare_webhook"
JSON_TYPES = ("application/json",)


def create_app(
    settings: AdmissionSettings,
    readiness: probes.Readiness | None = None,
    registry: CollectorRegistry | None = None,
) -> Starlette:
    """The app for `settings`. `readiness` is shared with the server that marks it serving; a fresh one
    (not ready until set) is made when omitted. Metrics go to `registry` (a fresh one by default)."""
    readiness = readiness or probes.Readiness()
    registry = registry or CollectorRegistry()
    stats = metrics.RequestMetrics(registry, METRICS_NAMESPACE, outcome_label="verdict")
    policy = review.Policy(rules=settings.policy, excluded_namespaces=settings.excluded_namespaces)
    limit = settings.max_body_bytes

    def endpoint(name: review.Endpoint) -> Any:
        async def handle(request: Request) -> Response:
            start = time.perf_counter()
            response, outcome, result = await _answer(request, name, policy, limit)
            elapsed = time.perf_counter() - start
            stats.observe(name, outcome, elapsed)
            _log(name, outcome, elapsed, result, response.status_code)
            return response

        return handle

    app = Starlette(
        routes=[
            Route(MUTATE_PATH, endpoint("mutate"), methods=["POST"]),
            Route(VALIDATE_PATH, endpoint("validate"), methods=["POST"]),
            *probes.probe_routes(readiness, registry),
        ],
        exception_handlers={HTTPException: _http_error},
    )
    app.state.readiness = readiness
    app.state.registry = registry
    return app


async def _answer(
    request: Request, name: review.Endpoint, policy: review.Policy, limit: int
) -> tuple[Response, str, review.Result | None]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in JSON_TYPES:
        shown = content_type or "none"
        return _error(415, f"content type must be application/json, got {shown}"), "unsupported_media", None
    try:
        body = await body_limit.read_limited(request, limit)
    except body_limit.BodyTooLarge as exc:
        return _error(413, str(exc)), "too_large", None
    except ClientDisconnect:
        # The caller gave up (its timeout, or ours closed it); nothing will read an answer.
        return _error(400, "client disconnected before sending the whole body"), "disconnected", None
    try:
        data = codec.decode(body)
    except codec.DecodeError as exc:
        return _error(400, f"body is not valid JSON: {exc}"), "bad_request", None
    try:
        result = review.review(data, name, policy)
    except review.ReviewError as exc:
        return _error(400, str(exc)), "bad_request", None
    except Exception:
        # A bug of ours: a 500 lets the webhook's failurePolicy decide, as for any call failure.
        log.exception("review failed", extra={"fields": {"endpoint": name}})
        return _error(500, "internal error while reviewing the request"), "error", None
    return _json(result.review), result.outcome, result


def _log(name: str, outcome: str, elapsed: float, result: review.Result | None, status: int) -> None:
    fields: dict[str, Any] = {"endpoint": name, "verdict": outcome, "status": status}
    if result is not None:
        req = result.request
        fields.update(
            uid=req.uid,
            kind=req.kind,
            namespace=req.namespace,
            name=req.name or _generate_name(req),
            operation=req.operation,
            violations=result.violations,
        )
    fields["duration_ms"] = round(elapsed * 1000, 3)
    if result is not None:
        logs.emit(log, logging.INFO, "review", fields)
    else:
        logs.emit(log, logging.WARNING, "rejected request", fields)


def _generate_name(req: review.Request) -> str:
    """The object's own name when the request carries none; `prefix*` for a generateName."""
    metadata = req.obj.get("metadata") if req.obj is not None else None
    if not isinstance(metadata, dict):
        return ""
    name, generate = metadata.get("name"), metadata.get("generateName")
    if isinstance(name, str) and name:
        return name
    return f"{generate}*" if isinstance(generate, str) and generate else ""


def _json(content: Any, status: int = 200) -> Response:
    return Response(codec.encode(content), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return _json(review.error_body(message), status)


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette raises these for unknown paths (404) and wrong methods (405); answer them in JSON too.
    assert isinstance(exc, HTTPException)
    return JSONResponse(review.error_body(exc.detail), status_code=exc.status_code, headers=exc.headers)


def prepare_certs(settings: AdmissionSettings, now: datetime) -> tls.TlsFiles:
    """The files to serve: `cert`/`key` when given (they must exist), else `cert_dir`'s tls.crt/tls.key,
    generated there (CA included) when both are missing. TlsError when they cannot be had."""
    if settings.cert is not None and settings.key is not None:
        files = tls.TlsFiles(cert=settings.cert, key=settings.key)
        if not files.exist():
            raise tls.TlsError(f"certificate {files.cert} or key {files.key} does not exist")
        return files
    files = tls.TlsFiles.in_dir(settings.cert_dir)
    dns_names = [*tls.DEFAULT_DNS_NAMES, *settings.service_dns]
    if not files.cert.exists() and not files.key.exists():
        tls.write_cert_dir(settings.cert_dir, now, dns_names=dns_names)
        log.info(
            "generated a development CA and serving certificate",
            extra={"fields": {"dir": str(settings.cert_dir)}},
        )
    elif not files.exist():
        raise tls.TlsError(f"{settings.cert_dir} holds only one of {tls.CERT_FILE} and {tls.KEY_FILE}")
    elif certificates.needs_renewal(files.cert.read_bytes(), now, dns_names, timedelta(days=7)):
        # Not replaced: it may be a mounted Secret managed elsewhere; just say so.
        log.warning(
            "serving certificate expires within 7 days or lacks some DNS names",
            extra={"fields": {"cert": str(files.cert), "dns_names": dns_names}},
        )
    return files


def run(settings: AdmissionSettings) -> int:
    """Serve the webhook over HTTPS until SIGINT/SIGTERM. Raises TlsError/ServeError when it cannot start."""
    logs.configure(settings.log_level, settings.log_format)
    files = prepare_certs(settings, datetime.now(UTC))
    readiness = probes.Readiness()
    options = server.ServeOptions(
        host=settings.host,
        port=settings.port,
        tls=files,
        cert_reload_interval_s=settings.cert_reload_interval_s,
    )
    server.AppServer(create_app(settings, readiness), options, readiness).run()
    return 0
