"""Reading manifests: files, directories, stdin; YAML streams, JSON, Lists; lines; broken input."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from webhook.cli import check, manifests, report

DATA = Path(__file__).parent.parent / "data" / "check"


def docs(items: list[manifests.Item]) -> list[manifests.Document]:
    return [i for i in items if isinstance(i, manifests.Document)]


def errors(items: list[manifests.Item]) -> list[manifests.ReadError]:
    return [i for i in items if isinstance(i, manifests.ReadError)]


def names(items: list[manifests.Item]) -> list[str]:
    return [d.obj["metadata"]["name"] for d in docs(items)]


def test_helm_stream_gives_each_object_its_line_and_template() -> None:
    items = list(manifests.read_paths([str(DATA / "helm" / "rendered.yaml")]))
    found = [(d.obj["kind"], d.line, d.origin) for d in docs(items)]
    assert found == [
        ("ServiceAccount", 3, "trainer/templates/serviceaccount.yaml"),
        ("Service", 14, "trainer/templates/service.yaml"),
        ("Deployment", 34, "trainer/templates/deployment.yaml"),
        ("Job", 80, "trainer/templates/job.yaml"),
    ]
    assert errors(items) == []


def test_field_line_points_at_the_field_inside_the_document() -> None:
    deployment = docs(list(manifests.read_paths([str(DATA / "helm" / "rendered.yaml")])))[2]
    path = "spec.template.spec.containers[0].resources.limits[aliyun.com/gpu-mem]"
    assert deployment.field_line(path) == 69
    assert deployment.field_line("spec.template") == 48
    assert deployment.field_line("spec.template.spec.containers[0]") == 58
    # A field that is not there resolves to its deepest present parent.
    assert deployment.field_line("spec.template.spec.initContainers[0]") == 53
    assert deployment.field_line("") == 34


def test_json_list_items_are_objects_of_their_own() -> None:
    items = list(manifests.read_paths([str(DATA / "mixed" / "list.json")]))
    assert names(items) == ["notebook", "bad-request"]
    # json.loads reads the file; lines are found (with the YAML composer) only when asked for.
    assert [d.line for d in docs(items)] == [1, 1]
    assert [d.field_line("") for d in docs(items)] == [6, 18]
    assert docs(items)[1].field_line("spec.containers[0].resources.requests[nvidia.com/gpu]") == 25


def test_yaml_list_items_get_the_line_of_their_item() -> None:
    text = "apiVersion: v1\nkind: PodList\nitems:\n- kind: Pod\n  metadata: {name: a}\n"
    text += "- kind: Pod\n  metadata:\n    name: b\n"
    items = list(manifests.read_text("x.yaml", text))
    assert [(d.obj["metadata"]["name"], d.line) for d in docs(items)] == [("a", 4), ("b", 6)]


def test_concatenated_json_values_are_separate_documents() -> None:
    text = '{"kind": "Pod", "metadata": {"name": "a"}}\n\n{"kind": "Pod",\n "metadata": {"name": "b"}}\n'
    items = list(manifests.read_text("<stdin>", text))
    assert [(d.obj["metadata"]["name"], d.line) for d in docs(items)] == [("a", 1), ("b", 3)]


def test_yaml_flow_mapping_that_is_not_json_is_read_as_yaml() -> None:
    items = list(manifests.read_text("<stdin>", "{kind: Pod, metadata: {name: flow}}\n"))
    assert names(items) == ["flow"]


def test_broken_yaml_keeps_the_documents_before_it_and_names_the_line() -> None:
    items = list(manifests.read_paths([str(DATA / "mixed" / "broken.yaml")]))
    assert names(items) == ["before-the-break"]
    [err] = errors(items)
    assert err.source.endswith("broken.yaml")
    assert err.line == 18
    assert err.problem.startswith("invalid YAML: ")
    assert str(err).endswith(f"broken.yaml:18: {err.problem}")


def test_broken_json_file_is_reported_as_json_with_its_line() -> None:
    [err] = list(manifests.read_text("a.json", '{\n  "kind": "Pod",\n  "metadata": {\n}'))
    assert isinstance(err, manifests.ReadError)
    assert err.problem.startswith("invalid JSON: ")
    assert err.line == 4


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("replicaCount: 1\n", "no kind: not a Kubernetes object"),
        ("- a\n- b\n", "not a Kubernetes object (a list, not a mapping)"),
        ("just words\n", "not a Kubernetes object (a string, not a mapping)"),
        ("kind: 7\n", "no kind: not a Kubernetes object"),
    ],
    ids=["values-file", "list", "scalar", "kind-not-a-string"],
)
def test_documents_that_are_not_objects_are_skipped_with_a_reason(text: str, reason: str) -> None:
    [item] = list(manifests.read_text("x.yaml", text))
    assert isinstance(item, manifests.Skipped)
    assert (item.line, item.reason) == (1, reason)


@pytest.mark.parametrize(
    "text", ["", "\n\n", "# only a comment\n", "---\n---\n", "---\n# c\n---\n"], ids=str.strip
)
def test_empty_and_comment_only_streams_yield_nothing(text: str) -> None:
    assert list(manifests.read_text("x.yaml", text)) == []


def test_directory_is_walked_recursively_in_sorted_order_for_manifest_extensions(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "deep").mkdir()
    (tmp_path / ".git").mkdir()
    for rel in ("b/deep/z.yml", "b/a.json", "a.yaml", ".git/config.yaml", "notes.txt", ".hidden.yaml"):
        (tmp_path / rel).write_text('{"kind": "Pod", "metadata": {"name": "x"}}')
    found = [os.path.relpath(str(p), tmp_path) for p in manifests.expand([str(tmp_path)])]
    assert found == ["a.yaml", "b/a.json", "b/deep/z.yml"]


def test_linked_directories_are_walked_once_and_a_link_loop_ends(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "pod.yaml").write_text("kind: Pod\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "base").symlink_to(shared)  # e.g. a kustomize base linked in
    (tree / "again").symlink_to(shared)
    (tree / "loop").symlink_to(tree)
    (tree / "z-link.yaml").symlink_to(shared / "pod.yaml")  # the same file again: its objects once
    (tree / "broken.yaml").symlink_to(tmp_path / "nowhere.yaml")  # read, and reported unreadable
    found = [os.path.relpath(str(p), tmp_path) for p in manifests.expand([str(tree)])]
    # A folder's files come before its subfolders': the link is read, the same file under again/ is not.
    assert found == ["tree/broken.yaml", "tree/z-link.yaml"]


def test_a_directory_that_cannot_be_listed_is_an_error_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.yaml").write_text("kind: Pod\n")
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "b.yaml").write_text("kind: Pod\n")
    real_scandir = os.scandir

    def refuse_locked(path: Any = ".") -> Any:  # root lists any directory, so a mode of 0 would not stop it
        if str(path) == str(tmp_path / "locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refuse_locked)
    items = list(manifests.expand([str(tmp_path)]))
    assert [str(i) for i in items] == [
        str(tmp_path / "a.yaml"),
        f"{tmp_path / 'locked'}: cannot list: Permission denied",
    ]


def test_named_file_is_read_whatever_its_extension(tmp_path: Path) -> None:
    path = tmp_path / "manifest.txt"
    path.write_text("kind: Pod\nmetadata: {name: p}\n")
    assert names(list(manifests.read_paths([str(path)]))) == ["p"]


def test_stdin_is_read_for_dash() -> None:
    stdin = io.BytesIO(b"kind: Pod\nmetadata: {name: from-stdin}\n")
    [doc] = list(manifests.read_paths(["-"], stdin))
    assert isinstance(doc, manifests.Document)
    assert (doc.source, doc.obj["metadata"]["name"]) == ("<stdin>", "from-stdin")


def test_missing_path_and_empty_directory_are_errors_and_reading_goes_on(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    good = DATA / "clean" / "pod.yaml"
    items = list(manifests.read_paths([str(tmp_path / "nope.yaml"), str(tmp_path / "empty"), str(good)]))
    assert [str(e) for e in errors(items)] == [
        f"{tmp_path / 'nope.yaml'}: no such file or directory",
        f"{tmp_path / 'empty'}: directory holds no .yaml, .yml or .json files",
    ]
    assert names(items) == ["share"]


def test_unreadable_file_is_an_error_and_the_next_file_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text("kind: Pod\n")
    real_open = open

    def refuse_secret(path, *args, **kwargs):  # root reads any file, so a mode of 0 would not stop it
        if str(path) == str(secret):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(manifests, "open", refuse_secret, raising=False)
    items = list(manifests.read_paths([str(secret), str(DATA / "clean" / "pod.yaml")]))
    assert [str(e) for e in errors(items)] == [f"{secret}: cannot read: Permission denied"]
    assert names(items) == ["share"]


def test_binary_file_is_reported_as_not_utf8() -> None:
    [err] = list(manifests.read_bytes("blob.yaml", b"kind: Pod\n\xff\xfe\x00"))
    assert isinstance(err, manifests.ReadError)
    assert (err.line, err.problem) == (2, "not UTF-8 text (byte 10)")


def test_utf8_byte_order_mark_is_accepted() -> None:
    assert names(
        list(manifests.read_bytes("bom.yaml", b"\xef\xbb\xbfkind: Pod\nmetadata: {name: bom}\n"))
    ) == ["bom"]


def test_control_characters_are_a_one_line_yaml_error_at_their_line_not_a_crash() -> None:
    [err] = list(manifests.read_text("x.yaml", "kind: Pod\nmetadata: {name: \x07}\n"))
    assert isinstance(err, manifests.ReadError)
    assert err.line == 2
    assert err.problem == "invalid YAML: unacceptable character #x0007: control characters are not allowed"


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    depth = 100_000
    items = list(manifests.read_text("deep.json", "[" * depth + "]" * depth))
    assert len(items) == 1
    assert isinstance(items[0], manifests.ReadError)


def test_alias_bomb_is_read_without_blowing_up() -> None:
    # Aliases are shared references in PyYAML, so the "billion laughs" stays small in memory.
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(10))}]" for i in range(1, 9)]
    text = "kind: ConfigMap\nmetadata: {name: lol}\ndata:\n" + "\n".join("  " + line for line in lines) + "\n"
    [doc] = list(manifests.read_text("lol.yaml", text))
    assert isinstance(doc, manifests.Document)


def test_a_key_written_twice_in_a_mapping_is_an_error_for_that_document_only() -> None:
    # PyYAML keeps the last value, so the first (here the half GPU) would go unchecked; kubectl refuses
    # the document. The next document is still read.
    dup = "kind: Pod\nmetadata: {name: dup}\nspec:\n  containers:\n  - name: c\n    resources:\n"
    dup += "      limits: {nvidia.com/gpu: 0.5}\n      limits: {nvidia.com/gpu: 1}\n"
    merged = "base: &b {k: 1}\nkind: ConfigMap\nmetadata: {name: merged}\ndata: {<<: *b, k: 2}\n"
    items = list(manifests.read_text("dup.yaml", dup + "---\n" + merged))
    assert isinstance(items[0], manifests.ReadError)
    assert (items[0].line, items[0].problem) == (
        8,
        'invalid YAML: key "limits" appears twice in one mapping (kubectl refuses it)',
    )
    assert isinstance(items[1], manifests.Document) and items[1].obj["data"] == {"k": 2}  # `<<` is no repeat


def test_a_broken_document_does_not_hide_the_documents_after_it() -> None:
    text = (
        "kind: Pod\nmetadata: {name: a}\n"
        "---\nkind: Pod\nmetadata: {name: [b\n"  # an unclosed flow sequence: PyYAML's stream ends here
        "---\nkind: Pod\nmetadata:\n  name: c\n"
        "--- # a second broken one\nkind: Pod\nmetadata: {name: d\n  bad: : :\n"
        "---\nkind: Pod\nmetadata: {name: e}\n"
    )
    items = list(manifests.read_text("x.yaml", text))
    assert names(items) == ["a", "c", "e"]
    assert [e.line for e in errors(items)] == [6, 13]
    docs = [i for i in items if isinstance(i, manifests.Document)]
    assert [d.line for d in docs] == [1, 7, 15]  # lines as in the file, after the resumed parts too


def test_a_broken_last_document_ends_the_file_with_one_error() -> None:
    items = list(manifests.read_text("x.yaml", "kind: Pod\nmetadata: {name: a}\n---\nkind: [Pod\n"))
    assert names(items) == ["a"]
    assert len(errors(items)) == 1


def _configmap(name: str) -> str:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n"


def test_reading_resumes_in_crlf_files_and_after_yamls_other_line_breaks() -> None:
    crlf = (_configmap("a") + "---\nx: [\n---\n" + _configmap("c")).replace("\n", "\r\n")
    assert names(list(manifests.read_text("x.yaml", crlf))) == ["a", "c"]
    # YAML counts NEL (and LS, PS) as line breaks: the resume must count lines the same way.
    nel = (
        _configmap("a")
        + '---\nx: "a\x85b\x85c\x85d\x85e"\ny: [\n---\n'
        + _configmap("c")
        + "---\n"
        + _configmap("d")
    )
    assert names(list(manifests.read_text("x.yaml", nel))) == ["a", "c", "d"]


def test_a_document_broken_on_its_own_marker_line_is_one_error() -> None:
    text = _configmap("a") + "--- @bad\n---\n" + _configmap("c")
    items = list(manifests.read_text("x.yaml", text))
    assert names(items) == ["a", "c"]
    assert [e.line for e in errors(items)] == [5]


def test_a_control_character_is_placed_at_its_line_after_non_ascii_text() -> None:
    # libyaml reports the place in UTF-8 bytes: counted as characters, the line would be far too late.
    text = _configmap("a") + "---\n# " + "中文注释" * 200 + "\ndata: \x01\n---\n" + _configmap("c")
    items = list(manifests.read_text("x.yaml", text))
    assert [e.line for e in errors(items)] == [7]
    assert "c" in names(items)


@pytest.mark.parametrize(
    ("value", "column"),
    [("NaN", 23), ("Infinity", 23), ("-Infinity", 23), ("[1, NaN]", 27)],
    ids=["nan", "infinity", "minus-infinity", "in-a-list"],
)
def test_nan_and_infinity_in_json_are_invalid_json_at_their_line_and_column(value: str, column: int) -> None:
    # Python's json reads them; kubectl, the API server and the webhook's decoder refuse them.
    text = '{"kind": "Pod",\n "spec": {"replicas": ' + value + "}}\n"
    [err] = list(manifests.read_text("pod.json", text))
    assert isinstance(err, manifests.ReadError)
    name = value.strip("[1, ]")
    assert err.problem == (
        f"invalid JSON: {name} is not a JSON value (JSON has no NaN or Infinity); kubectl refuses it "
        f"(column {column})"
    )
    assert err.line == 2


def test_nan_inside_a_string_is_text_and_json_that_only_looks_like_yaml_is_still_refused() -> None:
    text = '{"kind": "Pod", "metadata": {"name": "NaN", "labels": {"a": "Infinity \\" NaN"}}}'
    assert names(list(manifests.read_text("pod.json", text))) == ["NaN"]
    # The same text with a NaN value in a .yaml file: kubectl reads text starting with "{" as JSON.
    [err] = list(manifests.read_text("pod.yaml", '{"kind": "Pod", "x": NaN}'))
    assert isinstance(err, manifests.ReadError)
    assert err.problem.startswith("invalid JSON: NaN is not a JSON value")


def test_check_exits_2_for_a_json_file_holding_infinity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pod.json"
    path.write_text(
        '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},\n "spec": {"x": Infinity}}'
    )
    assert check.main([str(path)]) == report.UNREADABLE
    assert f"{path}:2: invalid JSON: Infinity is not a JSON value" in capsys.readouterr().out
