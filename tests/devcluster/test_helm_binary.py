"""Which Helm the bed and the demo run: GPUSHARE_HELM picks the major version, links are resolved to the
built `helm` (the name Helm 4 records as its field manager), and a wrong selection says what it accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.devcluster import helm


def _built(root: Path, major: int) -> Path:
    """What scripts/helm-bins and install-helm leave: <cache>/vN/helm, linked from .tools/bin."""
    target = root / "cache" / f"v{major}" / "helm"
    target.parent.mkdir(parents=True)
    target.write_text("#!/bin/sh\n")
    target.chmod(0o755)
    link = root / ".tools" / "bin" / helm.NAMES[major]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return target


def test_helm_3_is_the_default_and_gpushare_helm_selects_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(helm, "ROOT", tmp_path)
    v3, v4 = _built(tmp_path, 3), _built(tmp_path, 4)
    monkeypatch.delenv(helm.SELECT, raising=False)
    assert helm.binary() == str(v3)
    assert helm.binary(4) == str(v4)
    monkeypatch.setenv(helm.SELECT, "4")
    assert helm.binary() == str(v4)
    assert helm.binary(3) == str(v3)


def test_a_helm_on_path_is_used_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helm, "ROOT", tmp_path / "checkout")
    v4 = _built(tmp_path, 4)
    monkeypatch.setenv("PATH", str(tmp_path / ".tools" / "bin"))
    assert helm.binary(4) == str(v4)
    assert helm.binary(3) is None


@pytest.mark.parametrize("wrong", ["2", "v4", "helm4", " "])
def test_a_wrong_selection_names_what_it_accepts(monkeypatch: pytest.MonkeyPatch, wrong: str) -> None:
    monkeypatch.setenv(helm.SELECT, wrong)
    with pytest.raises(ValueError, match=r"GPUSHARE_HELM=.*expected one of 3, 4"):
        helm.binary()
