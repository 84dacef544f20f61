"""`gpushare certs`: files, permissions, SANs, CA reuse, and bad arguments."""

from __future__ import annotations

import stat
from datetime import UTC, datetime, timedelta

import pytest

from webhook.cli import certs
from webhook.core.pki import certificates


def test_writes_four_files_with_private_keys_0600(tmp_path, capsys):
    out = tmp_path / "certs"
    assert certs.main(["--out-dir", str(out)]) == 0
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {"tls.crt": 0o644, "tls.key": 0o600, "ca.crt": 0o644, "ca.key": 0o600}
    cert = (out / "tls.crt").read_bytes()
    assert certificates.dns_sans(cert) == ["localhost"]
    assert certificates.is_signed_by(cert, (out / "ca.crt").read_bytes())
    assert "new CA" in capsys.readouterr().out


def test_names_ips_and_days_are_used(tmp_path):
    argv = ["--out-dir", str(tmp_path), "--dns", "a.ns.svc", "--dns", "*.b.example", "--ip", "10.0.0.1"]
    assert certs.main([*argv, "--days", "30"]) == 0
    cert = (tmp_path / "tls.crt").read_bytes()
    assert certificates.dns_sans(cert) == ["a.ns.svc", "*.b.example"]
    now = datetime.now(UTC)
    assert not certificates.needs_renewal(cert, now, ["a.ns.svc"], timedelta(days=29))
    assert certificates.needs_renewal(cert, now, ["a.ns.svc"], timedelta(days=31))


def test_running_again_reuses_the_ca_unless_asked_for_a_new_one(tmp_path, capsys):
    assert certs.main(["--out-dir", str(tmp_path)]) == 0
    ca = (tmp_path / "ca.crt").read_bytes()
    serving = (tmp_path / "tls.crt").read_bytes()
    assert certs.main(["--out-dir", str(tmp_path), "--dns", "new.svc"]) == 0
    assert (tmp_path / "ca.crt").read_bytes() == ca
    assert (tmp_path / "tls.crt").read_bytes() != serving
    assert certificates.is_signed_by((tmp_path / "tls.crt").read_bytes(), ca)
    assert "reused CA" in capsys.readouterr().out
    assert certs.main(["--out-dir", str(tmp_path), "--new-ca"]) == 0
    assert (tmp_path / "ca.crt").read_bytes() != ca


@pytest.mark.parametrize(
    "argv",
    [
        ["--dns", "Bad_Name"],
        ["--dns", "-leading.dash"],
        ["--dns", ""],
        ["--ip", "300.1.1.1"],
        ["--ip", "localhost"],
        ["--days", "0"],
        ["--days", "ten"],
        ["--ca-days", "-1"],
        ["--unknown"],
    ],
    ids=str,
)
def test_bad_arguments_exit_2_and_write_nothing(tmp_path, argv):
    out = tmp_path / "certs"
    with pytest.raises(SystemExit) as exc:
        certs.main(["--out-dir", str(out), *argv])
    assert exc.value.code == 2
    assert not out.exists()


def test_an_unwritable_directory_exits_1(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert certs.main(["--out-dir", str(blocker / "certs")]) == 1
    assert "cannot create certificate directory" in capsys.readouterr().err
