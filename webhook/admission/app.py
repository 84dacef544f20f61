"""The webhook's ASGI app: POST /mutate and /validate over `review`, plus the probes and /metrics.

HTTP concerns only: method (405), content type (415), body size (413), JSON (400), one log line and one
metric per review. Deciding is `review.review`'s job.

A POST to exactly /mutate or /validate goes straight to its bare ASGI endpoint (`serving.fastpath`);
everything else (probes, /metrics, JSON 404/405, redirects, lifespan) is plain Starlette.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from webhook.admission import review
from webhook.admission.settings import AdmissionSettings
from webhook.core.pki import certificates
from webhook.serving import body as body_limit
from webhook.serving import buildinfo, fastpath, jsonbody, logs, metrics, probes, server, tls

log = logging.getLogger("webhook.admission")

MUTATE_PATH = "/mutate"
VALIDATE_PATH = "/validate"
METRICS_NAMESPACE = "gpushare_webhook"
JSON_TYPES = ("application/json",)


class ReviewEndpoint:
    """POST /mutate or /validate as a bare ASGI app. Every answer is its own JSON, a bug in the review
    (or in encoding its answer) included: a JSON 500, not the server's plain-text one."""

    def __init__(
        self, name: review.Endpoint, policy: review.Policy, limit: int, stats: metrics.RequestMetrics
    ) -> None:
        self.name = name
        self.policy = policy
        self.limit = limit
        self.stats = stats

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        status, content, outcome, result = await self._answer(scope["headers"], receive)
        elapsed = time.perf_counter() - start
        self.stats.observe(self.name, outcome, elapsed)
        log_review(self.name, outcome, elapsed, result, status)
        await fastpath.send_json(send, status, content)

    async def _answer(
        self, headers: list[tuple[bytes, bytes]], receive: Receive
    ) -> tuple[int, bytes, str, review.Result | None]:
        """(status, body, outcome, result): the result when the review ran."""
        content_type = ""
        for key, value in headers:
            if key == b"content-type":
                # Decoded first, as Starlette's Headers did: the same message for any bytes.
                content_type = value.decode("latin-1").split(";")[0].strip().lower()
                break
        if content_type not in JSON_TYPES:
            message = f"content type must be application/json, got {content_type or 'none'}"
            return 415, _error(message), "unsupported_media", None
        try:
            body = await body_limit.receive_body(headers, receive, self.limit)
        except body_limit.BodyTooLarge as exc:
            return 413, _error(str(exc)), "too_large", None
        except body_limit.ClientDisconnect:
            # The caller gave up (its timeout, or ours closed it); nothing will read an answer.
            return 400, _error("client disconnected before sending the whole body"), "disconnected", None
        try:
            data = jsonbody.decode(body)
        except jsonbody.DecodeError as exc:
            return 400, _error(f"body is not valid JSON: {exc}"), "bad_request", None
        try:
            result = review.review(data, self.name, self.policy)
            content = jsonbody.encode(result.review)
        except review.ReviewError as exc:
            return 400, _error(str(exc)), "bad_request", None
        except Exception:
            # A bug of ours: a 500 lets the webhook's failurePolicy decide, as for any call failure.
            log.exception("review failed", extra={"fields": {"endpoint": self.name}})
            return 500, _error("internal error while reviewing the request"), "error", None
        return 200, content, result.outcome, result


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
    buildinfo.register(registry)
    policy = review.Policy(rules=settings.policy, excluded_namespaces=settings.excluded_namespaces)
    limit = settings.max_body_bytes
    endpoints = {
        MUTATE_PATH: ReviewEndpoint("mutate", policy, limit, stats),
        VALIDATE_PATH: ReviewEndpoint("validate", policy, limit, stats),
    }
    app = fastpath.FastPathApp(
        endpoints, probes.probe_routes(readiness, registry), exception_handlers={HTTPException: _http_error}
    )
    app.state.readiness = readiness
    app.state.registry = registry
    return app


def log_review(name: str, outcome: str, elapsed: float, result: review.Result | None, status: int) -> None:
    if result is None:
        fields = {
            "endpoint": name,
            "verdict": outcome,
            "status": status,
            "duration_ms": round(elapsed * 1000, 3),
        }
        logs.emit(log, logging.WARNING, "rejected request", fields)
        return
    req = result.request
    fields = {  # one literal, in the order of the line's keys
        "endpoint": name,
        "verdict": outcome,
        "status": status,
        "uid": req.uid,
        "kind": req.kind,
        "namespace": req.namespace,
        "name": req.name or _generate_name(req),
        "operation": req.operation,
        "violations": result.violations,
        "duration_ms": round(elapsed * 1000, 3),
    }
    logs.emit(log, logging.INFO, "review", fields)


def _generate_name(req: review.Request) -> str:
    """The object's own name when the request carries none; `prefix*` for a generateName."""
    metadata = req.obj.get("metadata") if req.obj is not None else None
    if not isinstance(metadata, dict):
        return ""
    name, generate = metadata.get("name"), metadata.get("generateName")
    if isinstance(name, str) and name:
        return name
    return f"{generate}*" if isinstance(generate, str) and generate else ""


def _error(message: str) -> bytes:
    return jsonbody.encode(review.error_body(message))


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
            extra={"fields": {"dir": str(settings.cert_dir.resolve())}},
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


def serve_options(settings: AdmissionSettings, files: tls.TlsFiles) -> server.ServeOptions:
    """How the webhook serves (also what bench/admission_apiserver.py serves its no-op reference with)."""
    return server.ServeOptions(
        host=settings.host,
        port=settings.port,
        tls=files,
        cert_reload_interval_s=settings.cert_reload_interval_s,
    )


def app_server(
    settings: AdmissionSettings, options: server.ServeOptions, readiness: probes.Readiness
) -> server.AppServer:
    """The webhook's app on a server with `options`, its connection count among the app's metrics."""
    app = create_app(settings, readiness)
    return server.AppServer(app, options, readiness, metrics=(app.state.registry, METRICS_NAMESPACE))


def run(settings: AdmissionSettings) -> int:
    """Serve the webhook over HTTPS until SIGINT/SIGTERM. Raises TlsError/ServeError when it cannot start."""
    logs.configure(settings.log_level, settings.log_format)
    files = prepare_certs(settings, datetime.now(UTC))
    readiness = probes.Readiness()
    options = serve_options(settings, files)
    app_server(settings, options, readiness).run()
    return 0
