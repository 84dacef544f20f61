"""`gpushare_build_info` says which release and which Python serve a registry's metrics."""

from __future__ import annotations

import platform

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.serving import scraped
from webhook import __version__
from webhook.serving import buildinfo


def test_the_gauge_is_1_under_this_release_and_this_python() -> None:
    registry = CollectorRegistry()
    buildinfo.register(registry)
    labels = {"version": __version__, "python": platform.python_version()}
    assert registry.get_sample_value("gpushare_build_info", labels) == 1.0
    assert scraped.build_info(generate_latest(registry)) == scraped.THIS_BUILD


def test_a_registry_takes_it_once() -> None:
    registry = CollectorRegistry()
    buildinfo.register(registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        buildinfo.register(registry)
