"""`gpushare webhook`: flags over the config file, bad input exits, and a real process serving HTTPS."""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.admission import samples
from webhook import __version__
from webhook.cli import main as cli_main
from webhook.cli.serve import webhook as serve_webhook
from webhook.core.pki import certificates


def settings_for(argv: list[str]):
    return serve_webhook.settings_from_args(serve_webhook.build_parser().parse_args(argv))


def test_defaults_serve_https_on_all_addresses_port_8443_from_certs():
    s = settings_for([])
    assert (s.host, s.port, s.cert_dir, s.cert, s.key) == ("0.0.0.0", 8443, Path("certs"), None, None)


def test_the_readme_and_the_docs_name_the_default_bind_address_and_loopback_as_the_option():
    # Issue 13: the README said 127.0.0.1 while the webhook bound 0.0.0.0.
    root = Path(__file__).resolve().parents[2]
    host = settings_for([]).host
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert f"default `--host {host}`" in readme and "`--host 127.0.0.1`" in readme
    assert f"| `--host` | `host` | `{host}` |" in (root / "docs" / "webhook.md").read_text(encoding="utf-8")
    assert f"(default: {host}" in serve_webhook.build_parser().format_help().replace("\n", " ")


def test_flags_override_the_config_file(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        "port: 9443\nlogLevel: debug\nexcludedNamespaces: [a]\n"
        "schedulerName: from-file\nserviceDns: [x.svc]\n"
    )
    s = settings_for(
        [
            "--config",
            str(config),
            "--port",
            "10443",
            "--exclude-namespace",
            "b",
            "--exclude-namespace",
            "c",
            "--scheduler-name",
            "gpushare-scheduler",
            "--service-dns",
            "y.svc",
            "--max-body-bytes",
            "4096",
            "--log-format",
            "text",
            "--cert-reload-interval",
            "2.5",
        ]
    )
    assert s.port == 10443
    assert s.log_level == "debug"  # from the file: no flag given
    assert s.excluded_namespaces == {"b", "c"}
    assert s.policy.scheduler_name == "gpushare-scheduler"
    assert s.service_dns == ("y.svc",)
    assert (s.max_body_bytes, s.log_format, s.cert_reload_interval_s) == (4096, "text", 2.5)


@pytest.mark.parametrize(
    ("argv", "config", "message"),
    [
        (["--config", "{dir}/c.yaml"], "port: 1\n bad: 2\n", "c.yaml: line 2, column 5: mapping values are"),
        (["--config", "{dir}/c.yaml"], "colour: blue\n", "unknown key(s) colour"),
        (["--config", "{dir}/c.yaml"], "port: 70000\n", "c.yaml: port must be 0-65535, got 70000"),
        (["--config", "{dir}/missing.yaml"], None, "missing.yaml: No such file or directory\n"),
        (["--cert", "a.crt"], None, "webhook: cert and key go together"),
        (["--port", "70000"], None, "webhook: port must be 0-65535"),
        (["--max-body-bytes", "10"], None, "at least 1024"),
    ],
    ids=[
        "bad-yaml",
        "unknown-key",
        "port-in-file",
        "missing-file",
        "cert-without-key",
        "port-range",
        "tiny-body-limit",
    ],
)
def test_bad_config_exits_2_with_a_clear_message(tmp_path, capsys, argv, config, message):
    if config is not None:
        (tmp_path / "c.yaml").write_text(config)
    assert serve_webhook.main([a.format(dir=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv", [["--port", "x"], ["--log-level", "loud"], ["--log-format", "xml"], ["--bogus"]], ids=str
)
def test_bad_flags_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        serve_webhook.main(argv)
    assert exc.value.code == 2


def test_missing_certificate_files_exit_1_naming_them(tmp_path, capsys):
    argv = [
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--cert",
        str(tmp_path / "a.crt"),
        "--key",
        str(tmp_path / "a.key"),
    ]
    assert serve_webhook.main(argv) == 1
    assert "a.crt" in capsys.readouterr().err


def test_a_cert_dir_with_only_a_key_exits_1(tmp_path, capsys):
    (tmp_path / "tls.key").write_text("x")
    assert serve_webhook.main(["--host", "127.0.0.1", "--port", "0", "--cert-dir", str(tmp_path)]) == 1
    assert "only one of tls.crt and tls.key" in capsys.readouterr().err


def read_serving_line(proc: subprocess.Popen[str], lines: list[str], timeout_s: float = 20) -> dict[str, str]:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        entry = json.loads(line)
        if entry["msg"] == "serving":
            return dict(entry)
    raise AssertionError(f"no 'serving' log line; got {lines}")


def test_the_process_generates_certificates_serves_https_and_stops_on_sigterm(tmp_path):
    cert_dir = tmp_path / "certs"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "webhook.cli.main",
            "webhook",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--cert-dir",
            "certs",  # relative: the log must still say where they are
            "--service-dns",
            "gpushare-webhook.gpushare.svc",
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    lines: list[str] = []
    try:
        serving = read_serving_line(proc, lines)
        assert (serving["cert"], serving["key"]) == (str(cert_dir / "tls.crt"), str(cert_dir / "tls.key"))
        assert serving["version"] == __version__  # the one startup line says which release
        url = serving["url"].replace("127.0.0.1", "localhost")
        cert = (cert_dir / "tls.crt").read_bytes()
        assert certificates.dns_sans(cert) == ["localhost", "gpushare-webhook.gpushare.svc"]
        ctx = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
        with httpx.Client(base_url=url, verify=ctx, timeout=10) as client:
            assert client.get("/readyz").status_code == 200
            body = samples.review(samples.pod(), uid="proc-1")
            assert (
                client.post("/mutate?timeout=10s", json=body).json()["response"]["patchType"] == "JSONPatch"
            )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert proc.stderr is not None
        lines += proc.stderr.readlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    entries = [json.loads(line) for line in lines]
    reviews = [e for e in entries if e["msg"] == "review"]
    assert [(r["uid"], r["verdict"], r["kind"]) for r in reviews] == [("proc-1", "patched", "Pod")]
    assert not any("BEGIN" in line for line in lines)  # no certificate or key in the logs
    assert any(e["msg"] == "generated a development CA and serving certificate" for e in entries)


def test_gpushare_lists_the_webhook_and_certs_commands(capsys):
    assert cli_main.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "webhook" in out and "certs" in out
