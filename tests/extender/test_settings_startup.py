"""`gpushare extender` whose settings cannot reach a cluster: one line as `gpushare inspect` words it."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli import exitcodes
from webhook.cli.serve import extender as serve_extender


def test_no_kubeconfig_is_one_line_without_a_class_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config there
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert serve_extender.main(["--host", "127.0.0.1", "--port", "0"]) == exitcodes.FAILURE
    err = capsys.readouterr().err
    assert (
        err == "gpushare extender: cannot configure the Kubernetes client: no kubeconfig at ~/.kube/config\n"
    )
