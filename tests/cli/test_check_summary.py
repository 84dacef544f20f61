"""`gpushare check`'s summary counts every file it read, also those that hold no object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webhook.cli import check

DATA = Path(__file__).parent.parent / "data" / "check"
POD = "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x}]}\n"


def test_empty_and_comment_only_files_count_as_files_read(capsys: pytest.CaptureFixture[str]) -> None:
    # mixed/: broken.yaml, comments.yml, empty.yaml, list.json, values.yaml (notes.txt is no manifest).
    check.main(["-o", "json", str(DATA / "mixed")])
    assert json.loads(capsys.readouterr().out)["summary"]["files"] == 5


def test_a_pod_beside_an_empty_file_is_one_object_in_two_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    (tmp_path / "empty.yaml").write_text("")
    assert check.main([str(tmp_path)]) == 0
    assert (
        capsys.readouterr().out.splitlines()[-1]
        == "checked 1 object in 2 files, 0 denied (0 violations), 0 warnings"
    )


def test_input_that_could_not_be_opened_is_unreadable_not_a_file_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    assert check.main([str(tmp_path / "pod.yaml"), str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().out.splitlines()[-1] == (
        "checked 1 object in 1 file, 0 denied (0 violations), 0 warnings, 1 unreadable"
    )
