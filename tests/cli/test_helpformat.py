"""`--help` shows every option's default (issue 13): the formatter adds it, or the help text names it."""

from __future__ import annotations

import argparse
import importlib

import pytest

from webhook.admission import settings as admission_settings
from webhook.cli import helpformat, main
from webhook.cli.serve import webhook as serve_webhook

COMMANDS = sorted(main.COMMANDS)


def expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    return parser._get_formatter()._expand_help(action) if action.help else ""


def written(default: object) -> set[str]:
    return {str(default), f"{default:g}"} if isinstance(default, float) else {str(default)}


@pytest.mark.parametrize("command", COMMANDS, ids=COMMANDS)
def test_every_option_with_a_default_shows_it(command: str) -> None:
    parser = importlib.import_module(f"webhook.cli.{main.COMMANDS[command][0]}").build_parser()
    missing = [
        action.option_strings[0]
        for action in parser._actions
        if action.option_strings
        and helpformat.shown(action.default)
        and not any(text in expanded_help(parser, action) for text in written(action.default))
    ]
    assert missing == [], f"gpushare {command} --help does not show the default of {missing}"


def test_the_webhook_help_shows_the_defaults_the_settings_really_have() -> None:
    # Its flags default to None (a flag left out keeps the --config file's key), so the texts name them.
    parser = serve_webhook.build_parser()
    defaults = admission_settings.AdmissionSettings()
    by_flag = {a.option_strings[-1]: expanded_help(parser, a) for a in parser._actions if a.option_strings}
    for flag, value in [
        ("--host", defaults.host),
        ("--port", defaults.port),
        ("--cert-dir", defaults.cert_dir),
        ("--max-body-bytes", defaults.max_body_bytes),
        ("--log-level", defaults.log_level),
        ("--log-format", defaults.log_format),
        ("--cert-reload-interval", f"{defaults.cert_reload_interval_s:g}"),
    ]:
        assert f"(default: {value}" in by_flag[flag], flag


@pytest.mark.parametrize(
    ("help_text", "default", "shown"),
    [
        ("port", 8443, "port (default: 8443)"),
        ("port (default: 8443)", 8443, "port (default: 8443)"),
        ("kubeconfig file", None, "kubeconfig file"),
        ("elect a leader", False, "elect a leader"),
        ("repeatable", [], "repeatable"),
        ("API server URL", "", "API server URL"),
        ("seconds per request", 30.0, "seconds per request (default: 30)"),
        ("seconds", 0.5, "seconds (default: 0.5)"),
    ],
    ids=["added", "already-named", "none", "off", "empty-list", "empty-string", "whole-float", "float"],
)
def test_the_formatter_adds_the_default_only_where_it_says_something(
    help_text: str | None, default: object, shown: str
) -> None:
    parser = argparse.ArgumentParser(formatter_class=helpformat.DefaultsFormatter)
    action = parser.add_argument("--x", default=default, help=help_text)
    assert expanded_help(parser, action) == shown
