"""The usage and over-share flags of `gpushare device-plugin`: they reach the settings, and bad values
exit 2 naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli.serve import device_plugin as serve_device_plugin


def test_usage_flags_become_settings():
    args = serve_device_plugin.build_parser().parse_args(
        [
            "--fake-gpus",
            "0:16",
            "--usage-interval",
            "5",
            "--proc-root",
            "/host/proc",
            "--fake-processes",
            "p.yaml",
            "--overshare-grace",
            "30",
            "--overshare-event-interval",
            "120",
            "--overshare-evict",
        ]
    )
    s = serve_device_plugin.settings_from_args(args, {"NODE_NAME": "n1"})
    assert (s.usage_interval_s, s.proc_root, s.fake_processes) == (5, Path("/host/proc"), Path("p.yaml"))
    assert (s.overshare_grace_s, s.overshare_event_interval_s, s.overshare_evict) == (30, 120, True)


def test_the_defaults_poll_every_10_s_with_a_minutes_grace_and_never_evict():
    args = serve_device_plugin.build_parser().parse_args([])
    s = serve_device_plugin.settings_from_args(args, {"NODE_NAME": "n1"})
    assert (s.usage_interval_s, s.proc_root, s.overshare_grace_s, s.overshare_evict) == (
        10,
        Path("/proc"),
        60,
        False,
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--usage-interval", "-1"], "--usage-interval -1 must be 0 (off) or 1 to 86400 seconds"),
        (["--usage-interval", "0.5"], "--usage-interval 0.5 must be 0 (off)"),
        (["--usage-interval", "nan"], "--usage-interval nan must be 0 (off)"),
        (["--overshare-grace", "-5"], "--overshare-grace -5 must be 0 to 86400 seconds"),
        (["--overshare-grace", "inf"], "--overshare-grace inf must be"),
        (["--overshare-event-interval", "0"], "--overshare-event-interval 0 must be 1 to 86400"),
        (["--fake-processes", "p.yaml"], "--fake-processes goes with --fake-gpus or --inventory-file"),
        (["--overshare-evict", "--usage-interval", "0"], "--overshare-evict needs GPU usage"),
    ],
    ids=[
        "negative",
        "too-often",
        "nan",
        "negative-grace",
        "infinite-grace",
        "zero-events",
        "fake-nvml",
        "evict-off",
    ],
)
def test_bad_usage_flags_exit_2_naming_the_flag(monkeypatch, capsys, argv, needle):
    monkeypatch.setenv("NODE_NAME", "n")
    assert serve_device_plugin.main(argv) == 2
    assert needle in capsys.readouterr().err


def test_a_usage_flag_that_is_not_a_number_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as caught:
        serve_device_plugin.build_parser().parse_args(["--usage-interval", "often"])
    assert caught.value.code == 2
    assert "--usage-interval: invalid float value: 'often'" in capsys.readouterr().err
