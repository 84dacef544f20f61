"""caBundle: decoding, which CAs a bundle holds, the CA kept across a renewal, the JSON Patch."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from webhook.core.pki import cabundles, certificates

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def old() -> bytes:
    return certificates.generate_ca("old", NOW, valid_days=30).cert_pem


@pytest.fixture(scope="module")
def new() -> bytes:
    return certificates.generate_ca("new", NOW).cert_pem


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, b""), (7, b""), ("%%% not base64 %%%", b""), (_b64(b"pem"), b"pem")],
    ids=["absent", "not-a-string", "bad-base64", "base64"],
)
def test_a_ca_bundle_field_decodes_to_pem_or_empty(value: Any, expected: bytes) -> None:
    assert cabundles.decode(value) == expected


def test_a_bundle_lists_its_readable_certificates_in_order(old: bytes, new: bytes) -> None:
    garbage = b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
    found = cabundles.certificates_in(new + garbage + old)
    assert found == [certificates.load_certificate(new), certificates.load_certificate(old)]
    assert cabundles.contains(new + old, old)
    assert not cabundles.contains(new, old)
    assert not cabundles.contains(b"", new)


def test_asking_for_an_unreadable_certificate_raises(new: bytes) -> None:
    with pytest.raises(certificates.CertificateError):
        cabundles.contains(new, b"not a certificate")


@pytest.mark.parametrize(
    ("which", "at", "kept"),
    [
        ("none", NOW, False),
        ("same", NOW, False),
        ("old", NOW, True),
        ("old", NOW + timedelta(days=31), False),
    ],
    ids=["no-old-ca", "ca-kept", "old-ca-valid", "old-ca-expired"],
)
def test_the_replaced_ca_stays_trusted_only_while_it_is_valid(
    old: bytes, new: bytes, which: str, at: datetime, kept: bool
) -> None:
    previous = {"none": None, "same": new, "old": old}[which]
    assert cabundles.ca_to_keep(previous, new, at) == (previous if kept else None)


def _configuration(*bundles: bytes | None) -> dict[str, Any]:
    hooks = []
    for i, bundle in enumerate(bundles):
        config = {} if bundle is None else {"caBundle": _b64(bundle)}
        hooks.append({"name": f"hook-{i}.gpushare.aliyun.com", "clientConfig": config})
    return {"metadata": {"resourceVersion": "7"}, "webhooks": hooks}


def test_webhooks_that_trust_the_ca_are_left_alone(new: bytes, old: bytes) -> None:
    assert cabundles.patch(_configuration(new, old + new), new, old) == []
    assert cabundles.patch({"metadata": {}}, new, None) == []


def test_each_webhook_lacking_the_ca_gets_it_guarded_by_a_test_of_its_name(new: bytes, old: bytes) -> None:
    ops = cabundles.patch(_configuration(new, None, old), new, old)
    assert ops == [
        {"op": "test", "path": "/webhooks/1/name", "value": "hook-1.gpushare.aliyun.com"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": _b64(new)},
        {"op": "test", "path": "/webhooks/2/name", "value": "hook-2.gpushare.aliyun.com"},
        {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": _b64(new + old)},
    ]


def test_the_previous_ca_is_not_added_to_a_bundle_that_did_not_trust_it(new: bytes, old: bytes) -> None:
    foreign = certificates.generate_ca("foreign", NOW).cert_pem
    ops = cabundles.patch(_configuration(foreign), new, old)
    assert ops[1]["value"] == _b64(new)
