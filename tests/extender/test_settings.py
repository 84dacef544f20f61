"""The advertised URL: checked and normalised, defaulted from POD_IP by `gpushare extender`."""

from __future__ import annotations

import pytest

from webhook.cli.serve import extender as serve_extender
from webhook.extender import settings as ext_settings


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("http://10.0.0.7:39999", "http://10.0.0.7:39999"),
        ("https://extender-0.example:443/", "https://extender-0.example:443"),
        ("http://fd00::7:39999", "http://[fd00::7]:39999"),  # http://$(POD_IP):port in an IPv6 cluster
        ("http://[fd00::7]:39999", "http://[fd00::7]:39999"),
    ],
    ids=["ipv4", "name-trailing-slash", "bare-ipv6", "bracketed-ipv6"],
)
def test_advertise_url_is_normalised(value, expected):
    assert ext_settings.advertise_url(value) == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("10.0.0.7:39999", "not an http:// or https:// URL"),
        ("ftp://10.0.0.7:21", "not an http:// or https:// URL"),
        ("http://10.0.0.7", "needs a host and a port"),
        ("http://:39999", "needs a host and a port"),
        ("http://10.0.0.7:port", "bad port"),
        ("http://10.0.0.7:39999/gpushare-scheduler", "only scheme, host and port"),
        ("http://user@10.0.0.7:39999", "only scheme, host and port"),
        ("http://not an ip:39999", "not a URL"),
        ("", "not a URL"),
    ],
    ids=["no-scheme", "ftp", "no-port", "no-host", "bad-port", "path", "userinfo", "space", "empty"],
)
def test_bad_advertise_url_is_refused(value, problem):
    with pytest.raises(ValueError, match=problem):
        ext_settings.advertise_url(value)


def settings(argv: list[str]) -> ext_settings.ExtenderSettings:
    return serve_extender.settings_from(serve_extender.build_parser().parse_args(argv))


@pytest.mark.parametrize(
    ("pod_ip", "argv", "expected"),
    [
        ("10.1.2.3", ["--port=4000"], "http://10.1.2.3:4000"),
        ("10.1.2.3", ["--tls-cert=c.pem", "--tls-key=k.pem"], "https://10.1.2.3:39999"),
        ("fd00::9", [], "http://[fd00::9]:39999"),
        ("", [], ""),
        (None, [], ""),
        ("10.1.2.3", ["--advertise-url=http://ext.example:1"], "http://ext.example:1"),
    ],
    ids=["pod-ip", "tls-means-https", "ipv6", "empty-pod-ip", "no-pod-ip", "flag-wins"],
)
def test_cli_advertises_the_pod_ip_unless_told_otherwise(monkeypatch, pod_ip, argv, expected):
    if pod_ip is None:
        monkeypatch.delenv("POD_IP", raising=False)
    else:
        monkeypatch.setenv("POD_IP", pod_ip)
    assert settings(argv).advertise_url == expected


def test_cli_forwarding_flags_reach_the_settings(monkeypatch):
    monkeypatch.delenv("POD_IP", raising=False)
    s = settings(["--forward-ca=/etc/ca.pem", "--forward-server-name=gpushare-extender.kube-system.svc"])
    assert str(s.forward_ca) == "/etc/ca.pem"
    assert s.forward_server_name == "gpushare-extender.kube-system.svc"
    assert s.forward_timeout_s == 3.0
    defaults = settings([])
    assert defaults.forward_ca is None and defaults.forward_server_name == ""


def test_cli_refuses_a_bad_advertise_url(capsys):
    with pytest.raises(SystemExit) as exc:
        serve_extender.build_parser().parse_args(["--advertise-url=http://10.0.0.7"])
    assert exc.value.code == 2
    assert "needs a host and a port" in capsys.readouterr().err


def test_cli_refuses_a_pod_ip_that_makes_no_url(monkeypatch):
    monkeypatch.setenv("POD_IP", "not an ip:")
    with pytest.raises(SystemExit, match="POD_IP"):
        settings([])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [([], True), (["--best-fit-filter"], True), (["--no-best-fit-filter"], False)],
    ids=["default-on", "on", "off"],
)
def test_cli_best_fit_filter_flag_reaches_the_settings(monkeypatch, argv, expected):
    monkeypatch.delenv("POD_IP", raising=False)
    assert settings(argv).best_fit_filter is expected


def test_cli_refuses_a_value_for_the_best_fit_switch(capsys):
    with pytest.raises(SystemExit) as exc:
        serve_extender.build_parser().parse_args(["--best-fit-filter=no"])
    assert exc.value.code == 2
    assert "--best-fit-filter" in capsys.readouterr().err
