"""`gpushare check` on names it does not control: file names printed escaped, Helm origins kept to their
own document."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from webhook.cli import check, manifests, report
from webhook.core.admission import verdict

ESC_NAME = "f\x1b[32mgreen\nerror: fake.yaml"
ESCAPED = "f\\x1b[32mgreen\\x0aerror: fake.yaml"
DENIED_POD = b"""apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: c
    resources: {limits: {nvidia.com/gpu: 0.5}}
"""


def text_report(*paths: str, stdin: bytes = b"") -> tuple[int, str]:
    out = io.StringIO()
    code = check.run(check.CheckSettings(paths=paths), stdin=io.BytesIO(stdin), out=out, err=io.StringIO())
    return code, out.getvalue()


def test_file_names_are_escaped_in_every_text_line(tmp_path: Path) -> None:
    denied = tmp_path / f"{ESC_NAME}.yaml"
    denied.write_bytes(DENIED_POD)
    broken = tmp_path / f"{ESC_NAME}.broken"
    broken.write_bytes(b"x: [\n")
    values = tmp_path / f"{ESC_NAME}.values"
    values.write_bytes(b"replicas: 1\n")
    code, out = text_report(str(denied), str(broken), str(values))
    assert code == report.UNREADABLE
    assert "\x1b" not in out
    lines = out.splitlines()
    assert len(lines) == 5  # the object, its violation, the error, the skipped document, the summary
    assert lines[0].startswith(f"{tmp_path}/{ESCAPED}.yaml:1: Pod p: denied")
    assert lines[1].startswith(f"  {tmp_path}/{ESCAPED}.yaml:7: error: ")
    assert lines[2].startswith(f"error: {tmp_path}/{ESCAPED}.broken:2: invalid YAML")
    assert lines[3].startswith(f"skipped: {tmp_path}/{ESCAPED}.values:1: no kind")


def test_json_keeps_the_file_name_as_it_is(tmp_path: Path) -> None:
    denied = tmp_path / f"{ESC_NAME}.yaml"
    denied.write_bytes(DENIED_POD)
    found = check.check_paths([str(denied)], verdict.Policy())
    assert report.to_json(found)["results"][0]["file"] == str(denied)


def test_a_helm_origin_is_escaped_too() -> None:
    # YAML refuses ESC even in a comment, but not a right-to-left override, which reorders what follows.
    code, out = text_report("-", stdin="# Source: chart/\u202ecod.yaml\n".encode() + DENIED_POD)
    assert code == report.VIOLATIONS
    assert "(from chart/\\u202ecod.yaml)" in out.splitlines()[0]


def test_a_bad_config_path_is_escaped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert check.main(["--config", str(tmp_path / ESC_NAME), "-"]) == report.UNREADABLE
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.count("\n") == 1 and ESCAPED in err


HELM = b"""---
# Source: chart/templates/a.yaml
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
"""
A = "chart/templates/a.yaml"
B = "chart/templates/b.yaml"


@pytest.mark.parametrize(
    ("stream", "origins"),
    [
        (HELM + b"---\n" + DENIED_POD, [A, None]),
        (HELM + b"...\n---\n" + DENIED_POD, [A, None]),
        (HELM + b"--- # no source\n" + DENIED_POD, [A, None]),
        (HELM + f"---\n# Source: {B}\n".encode() + DENIED_POD, [A, B]),
        (HELM[4:] + b"---\n" + DENIED_POD, [A, None]),
        (HELM + b"---\n" + DENIED_POD + HELM, [A, None, A]),
    ],
    ids=["after-dashes", "after-dots", "dashes-and-comment", "own-source", "first-without-marker", "between"],
)
def test_a_helm_origin_belongs_only_to_its_own_document(stream: bytes, origins: list[str | None]) -> None:
    items = manifests.read_bytes("<stdin>", stream)
    assert [d.origin for d in items if isinstance(d, manifests.Document)] == origins


def test_a_stream_of_helm_output_and_another_file_does_not_lend_the_origin() -> None:
    # cat helm.yaml extra.yaml | gpushare check -: extra.yaml has no # Source: comment.
    code, out = text_report("-", stdin=HELM[4:] + b"---\n" + DENIED_POD)
    assert code == report.VIOLATIONS
    assert out.splitlines()[0] == "<stdin>:6: Pod p: denied"
