"""`gpushare inspect --extender https://...` against a real extender that asks for client certificates:
the extender's CA and the client pair of its Secret get through; without them, a clear error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.extender.factory import node
from webhook.cli.inspect import command
from webhook.core.pki import certificates
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.extender.service import Extender
from webhook.extender.settings import ExtenderSettings

NOW = datetime.now(UTC)


def _pki(tmp_path: Path, dns: list[str], ips: list[str]) -> dict[str, Path]:
    """ca, tls.crt/key (serving `dns` and `ips`) and client.crt/key, all from one CA, as files."""
    ca = certificates.generate_ca("extender-ca", NOW)
    pairs = {
        "tls": certificates.generate_serving(ca, dns, ips, NOW),
        "client": certificates.generate_client(ca, "gpushare-scheduler", [], NOW),
    }
    out = {"ca": tmp_path / "ca.crt"}
    out["ca"].write_bytes(ca.cert_pem)
    for name, pair in pairs.items():
        out[f"{name}.crt"], out[f"{name}.key"] = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
        out[f"{name}.crt"].write_bytes(pair.cert_pem)
        out[f"{name}.key"].write_bytes(pair.key_pem)
    return out


def _extender(apiserver: ApiServer, files: dict[str, Path]) -> Extender:
    apiserver.put(node("n1", 16, 8))
    settings = ExtenderSettings(
        host="127.0.0.1", port=0, tls_cert=files["tls.crt"], tls_key=files["tls.key"], client_ca=files["ca"]
    )
    ext = Extender(settings, apiserver.new_client()).start()
    assert ext.wait_synced(10)
    return ext


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return _pki(tmp_path, ["localhost"], ["127.0.0.1"])


@pytest.fixture
def url(apiserver: ApiServer, files: dict[str, Path]) -> Iterator[str]:
    ext = _extender(apiserver, files)
    yield f"{ext.url}/gpushare-scheduler"
    ext.stop()


def test_the_extenders_ca_and_client_certificate_get_its_view(url, files, capsys):
    argv = ["--extender", url, "--extender-ca", str(files["ca"]), "-o", "json"]
    argv += ["--extender-cert", str(files["client.crt"]), "--extender-key", str(files["client.key"])]
    assert command.main(argv) == 0
    assert [n["name"] for n in json.loads(capsys.readouterr().out)["nodes"]] == ["n1"]


def test_without_a_client_certificate_the_refusal_is_shown(url, files, capsys):
    assert command.main(["--extender", url, "--extender-ca", str(files["ca"])]) == 1
    err = capsys.readouterr().err
    assert "answered HTTP 403: the gpushare extender answers filter, prioritize, bind and inspect" in err


def test_an_unreadable_client_certificate_exits_1_naming_it(url, files, tmp_path, capsys):
    missing = tmp_path / "missing.crt"
    argv = ["--extender", url, "--extender-cert", str(missing), "--extender-key", str(files["client.key"])]
    assert command.main(argv) == 1
    assert f"cannot load {missing}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--extender-ca", "ca.crt"], "go with --extender"),
        (["--extender-server-name", "x.svc"], "go with --extender"),
        (
            ["--extender", "https://x", "--extender-cert", "c.crt"],
            "--extender-cert and --extender-key go together",
        ),
    ],
    ids=["tls-files-without-extender", "server-name-without-extender", "cert-without-key"],
)
def test_tls_flags_that_cannot_work_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        command.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


SERVICE = "gs-gpushare-extender.gpu-system.svc"


@pytest.fixture
def service_only_url(apiserver: ApiServer, tmp_path: Path) -> Iterator[tuple[str, dict[str, Path]]]:
    """An extender whose certificate names only its Service, as the chart issues it, reached on 127.0.0.1
    (what `kubectl port-forward` gives)."""
    files = _pki(tmp_path, [SERVICE], [])
    ext = _extender(apiserver, files)
    yield f"{ext.url}/gpushare-scheduler", files
    ext.stop()


def _tls_argv(url: str, files: dict[str, Path]) -> list[str]:
    return [
        "--extender", url, "--extender-ca", str(files["ca"]), "-o", "json",
        "--extender-cert", str(files["client.crt"]), "--extender-key", str(files["client.key"]),
    ]  # fmt: skip


def test_a_port_forwarded_extender_is_verified_against_its_service_name(service_only_url, capsys):
    url, files = service_only_url
    assert command.main([*_tls_argv(url, files), "--extender-server-name", SERVICE]) == 0
    assert [n["name"] for n in json.loads(capsys.readouterr().out)["nodes"]] == ["n1"]


def test_without_the_server_name_the_address_mismatch_is_an_error_not_a_trust(service_only_url, capsys):
    url, files = service_only_url
    assert command.main(_tls_argv(url, files)) == 1
    err = capsys.readouterr().err
    assert "cannot reach the extender" in err and "127.0.0.1" in err
