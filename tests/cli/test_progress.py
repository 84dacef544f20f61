"""The progress line: shown and erased on a terminal, absent when the stream is piped; and `inspect`'s use."""

from __future__ import annotations

import io

import pytest

from webhook.cli import progress
from webhook.cli.inspect import command
from webhook.cli.inspect.settings import InspectSettings
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import client as kube_client


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_on_a_terminal_the_line_is_rewritten_at_most_every_interval_and_erased_at_the_end() -> None:
    stream, clock = Terminal(), Clock()
    with progress.Progress(stream, interval=0.1, clock=clock) as line:
        line.show("one")
        line.show("two")  # same instant: skipped
        clock.now = 0.2
        line.show("three")
    assert stream.getvalue().split(progress.CLEAR_LINE) == ["", "one", "three", ""]


def test_when_piped_nothing_is_written() -> None:
    stream = io.StringIO()
    with progress.Progress(stream) as line:
        assert not line.enabled
        line.show("reading", force=True)
        assert list(line.counted(range(3), "items")) == [0, 1, 2]
    assert stream.getvalue() == ""


def test_counted_yields_every_item_and_shows_the_count() -> None:
    stream = Terminal()
    with progress.Progress(stream, interval=0.0) as line:
        assert list(line.counted("abc", "reading pods")) == ["a", "b", "c"]
    shown = [s for s in stream.getvalue().split(progress.CLEAR_LINE) if s]
    assert shown == ["reading pods ...", "reading pods: 1", "reading pods: 2", "reading pods: 3"]


def test_the_line_is_cut_to_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "11")  # a wrapped line could not be rewritten in place
    stream = Terminal()
    progress.Progress(stream).show("x" * 50)
    assert stream.getvalue() == progress.CLEAR_LINE + "x" * 10


def test_an_error_inside_still_erases_the_line() -> None:
    stream = Terminal()
    with pytest.raises(KeyboardInterrupt), progress.Progress(stream) as line:
        line.show("reading")
        raise KeyboardInterrupt
    assert stream.getvalue().endswith(progress.CLEAR_LINE)


def test_inspect_counts_nodes_and_pods_on_a_terminal_and_prints_the_table_after(
    apiserver: ApiServer,
) -> None:
    apiserver.add_node("n1", gpus=1, gpu_mem=16)
    for i in range(3):
        apiserver.add_pod(f"p{i}", node_name="n1", phase="Running")
    settings = InspectSettings(client=kube_client.ClientSettings(host=apiserver.url))
    stderr, out = Terminal(), io.StringIO()
    line = progress.Progress(stderr, interval=0.0)
    assert command.run(settings, out, progress=line) == 0
    shown = [s for s in stderr.getvalue().split(progress.CLEAR_LINE) if s]
    assert shown[0] == "reading nodes ..."
    assert shown[-1] == "nodes: 1; reading pods: 3"
    assert stderr.getvalue().endswith(progress.CLEAR_LINE)  # erased before the table
    assert out.getvalue().startswith("NAME")


def test_inspect_writes_nothing_to_a_piped_stderr(
    apiserver: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    apiserver.add_node("n1", gpus=1, gpu_mem=16)
    assert command.main(["--server", apiserver.url, "n1"]) == 0
    assert capsys.readouterr().err == ""
