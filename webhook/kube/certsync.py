"""Keep a certificate Secret usable and its CA in the caBundle of named webhook configurations, via the API.

What the Secret holds and when to reissue it is `webhook.core.pki.certsecrets`; what caBundle becomes is
`webhook.core.pki.cabundles`. This module reads and writes: a Secret that is missing or unusable is created or
replaced, then every named configuration is patched. Races between Jobs or replicas are settled by
resourceVersion: a 409 (or a 422 from a failed `test`) is re-read and retried. Used by `gpushare
ensure-certs`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from webhook.core.pki import cabundles, certsecrets
from webhook.kube import errors, rest

log = logging.getLogger("gpushare.ensure_certs")

MUTATING = "mutatingwebhookconfigurations"
VALIDATING = "validatingwebhookconfigurations"

Obj = dict[str, Any]


class ClusterError(errors.ApiError):
    """An API call failed; `status` is the HTTP status (0 when the server could not be reached)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, "", message)

    def __str__(self) -> str:
        return f"HTTP {self.status}: {self.message}" if self.status else self.message


class Cluster(Protocol):
    """The few API calls `ensure` makes; dict in, dict out; failures raise ClusterError."""

    def get_secret(self, namespace: str, name: str) -> Obj | None: ...
    def create_secret(self, namespace: str, body: Obj) -> Obj: ...
    def replace_secret(self, namespace: str, name: str, body: Obj) -> Obj: ...
    def get_webhook_configuration(self, plural: str, name: str) -> Obj | None: ...
    def patch_webhook_configuration(self, plural: str, name: str, patch: list[Obj]) -> Obj: ...


@dataclass(frozen=True, slots=True)
class EnsureSettings:
    namespace: str
    secret: str
    service_dns: tuple[str, ...]
    mutating: tuple[str, ...] = ()
    validating: tuple[str, ...] = ()
    ca_valid_days: int = 3650
    valid_days: int = 365
    renew_before: timedelta = timedelta(days=30)
    attempts: int = 8
    client_name: str = ""  # also keep a client pair with this common name, and the CA key (mtlssecret)
    # Only create a missing Secret (or replace one no server could load): keep a loadable one even when
    # it is due for renewal, and patch nothing. For Helm's pre-install/pre-upgrade hook: Helm applies the
    # caBundle it rendered *before* that hook ran, so a renewal there would be undone until the
    # post-upgrade hook; renewing happens in post-* and the CronJob.
    create_only: bool = False

    @property
    def spec(self) -> certsecrets.SecretSpec:
        return certsecrets.SecretSpec(
            dns_names=self.service_dns,
            client_name=self.client_name,
            ca_valid_days=self.ca_valid_days,
            valid_days=self.valid_days,
            renew_before=self.renew_before,
        )


@dataclass(slots=True)
class Outcome:
    secret: str = "kept"  # kept | created | replaced
    patched: list[str] = field(default_factory=list)  # "<plural>/<name>"
    unchanged: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # configurations not there yet (pre-install run)


def ensure(cluster: Cluster, settings: EnsureSettings, now: Callable[[], datetime]) -> Outcome:
    """Make the Secret usable, then put its CA into every webhook of the named configurations."""
    outcome = Outcome()
    if settings.create_only:
        current = cluster.get_secret(settings.namespace, settings.secret)
        # Kept when the pods can serve it, even expired: the post-* run renews it and patches caBundle.
        # A pair no server could load is replaced now, or pods rolled by the upgrade never start (and
        # `helm --wait` never reaches the post hook).
        if current is not None and certsecrets.serving_is_loadable(certsecrets.decoded_data(current)):
            return outcome
    ca_pem, previous_ca = _ensure_secret(cluster, settings, now, outcome)
    if settings.create_only:
        return outcome
    targets = [(MUTATING, n) for n in settings.mutating] + [(VALIDATING, n) for n in settings.validating]
    for plural, name in targets:
        result = _ensure_ca_bundle(
            cluster, plural, name, ca_pem=ca_pem, previous_ca=previous_ca, attempts=settings.attempts
        )
        getattr(outcome, result).append(f"{plural}/{name}")
    return outcome


def _ensure_secret(
    cluster: Cluster, s: EnsureSettings, now: Callable[[], datetime], outcome: Outcome
) -> tuple[bytes, bytes | None]:
    spec = s.spec
    for _ in range(s.attempts):
        current = cluster.get_secret(s.namespace, s.secret)
        data = certsecrets.decoded_data(current)
        if current is not None and certsecrets.is_usable(spec, data, now()):
            return data["ca.crt"], None
        new = certsecrets.issue(spec, data, now())
        body = certsecrets.secret_object(s.secret, s.namespace, new)
        try:
            if current is None:
                cluster.create_secret(s.namespace, body)
                outcome.secret = "created"
            else:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                cluster.replace_secret(s.namespace, s.secret, body)
                outcome.secret = "replaced"
        except ClusterError as exc:
            if exc.status == 409:  # another Job or replica wrote first: judge what it wrote
                log.info(
                    "secret changed concurrently; reading it again", extra={"fields": {"secret": s.secret}}
                )
                continue
            raise
        log.info(
            "wrote a new CA and serving certificate",
            extra={"fields": {"secret": s.secret, "action": outcome.secret}},
        )
        return new["ca.crt"], cabundles.ca_to_keep(data.get("ca.crt"), new["ca.crt"], now())
    raise ClusterError(
        409, f"secret {s.namespace}/{s.secret} kept changing; gave up after {s.attempts} tries"
    )


def _ensure_ca_bundle(
    cluster: Cluster, plural: str, name: str, *, ca_pem: bytes, previous_ca: bytes | None, attempts: int
) -> str:
    for _ in range(attempts):
        config = cluster.get_webhook_configuration(plural, name)
        if config is None:
            log.info(
                "webhook configuration not found (yet); skipped", extra={"fields": {"configuration": name}}
            )
            return "missing"
        patch = cabundles.patch(config, ca_pem, previous_ca)
        if not patch:
            return "unchanged"
        # The resourceVersion makes the patch conditional: a concurrent writer gives 409, and we re-read.
        rv = config["metadata"]["resourceVersion"]
        patch.append({"op": "replace", "path": "/metadata/resourceVersion", "value": rv})
        try:
            cluster.patch_webhook_configuration(plural, name, patch)
        except ClusterError as exc:
            if exc.status in (409, 422):  # 422: a `test` failed, the webhook list moved under us
                continue
            raise
        log.info("patched caBundle", extra={"fields": {"configuration": name}})
        return "patched"
    raise ClusterError(409, f"{plural}/{name} kept changing; gave up after {attempts} tries")


class KubeCluster:
    """`Cluster` over an official-client `ApiClient`; its ApiError ends here as ClusterError."""

    def __init__(self, api_client: Any) -> None:
        self._api = api_client

    def get_secret(self, namespace: str, name: str) -> Obj | None:
        return self._read(rest.path("secrets", name, namespace))

    def create_secret(self, namespace: str, body: Obj) -> Obj:
        return self._call("POST", rest.path("secrets", namespace=namespace), body)

    def replace_secret(self, namespace: str, name: str, body: Obj) -> Obj:
        return self._call("PUT", rest.path("secrets", name, namespace), body)

    def get_webhook_configuration(self, plural: str, name: str) -> Obj | None:
        return self._read(_config_path(plural, name))

    def patch_webhook_configuration(self, plural: str, name: str, patch: list[Obj]) -> Obj:
        return self._call("PATCH", _config_path(plural, name), patch, rest.JSON_PATCH)

    def _read(self, path: str) -> Obj | None:
        try:
            return self._call("GET", path)
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise

    def _call(self, method: str, path: str, body: Any = None, content_type: str = rest.JSON) -> Obj:
        try:
            reply: Obj = rest.request(self._api, method, path, body=body, content_type=content_type) or {}
        except errors.ApiError as exc:
            # A transport error's message already says "cannot reach the API server at <url>: <why>".
            raise ClusterError(exc.status, exc.message or exc.reason) from None
        return reply


def _config_path(plural: str, name: str) -> str:
    return rest.path(plural, name, group="admissionregistration.k8s.io")
